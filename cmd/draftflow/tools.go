package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/draftflow/draftflow/encode"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
)

func cmdEncode(ctx context.Context, args []string) error {
	fs := newFlagSet("encode")
	modelDir := fs.String("model", "", "model directory (default: the bundled sample tokenizer)")
	kwargs := fs.String("template-kwargs", "", `extra chat-template variables as a JSON object, e.g. '{"enable_thinking": false}'`)
	text := fs.Bool("text", false, `encode each line's "text" field without a chat template`)
	ctxLen := fs.Int("context-length", 0,
		"the model's context window in tokens, for the too-long check (default: from the model directory; without one, no check)")
	turns := fs.String("turns", ingest.TurnsAll, "which turn of each conversation to encode: all (the prompt of its first assistant turn, "+
		"what `run` sends first; later turns depend on the replies) or last (every message up to the last user message)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *turns != ingest.TurnsAll && *turns != ingest.TurnsLast {
		return fmt.Errorf("--turns %q: want %s or %s", *turns, ingest.TurnsAll, ingest.TurnsLast)
	}
	var kw map[string]any
	if *kwargs != "" {
		if err := json.Unmarshal([]byte(*kwargs), &kw); err != nil {
			return fmt.Errorf("--template-kwargs: %w", err)
		}
	}
	m, cleanup, err := tokenize.LoadModelOrBundled(*modelDir)
	defer cleanup()
	if err != nil {
		return err
	}
	window := 0
	if !*text {
		// Conversations get the stage's too-long check where the window is known; raw text (--text) has no
		// sampling to check, and the ids need no window.
		if window, err = m.ContextWindow(*ctxLen); err != nil {
			slog.Warn("no context length: the ids are printed without the too-long check (pass --context-length for it)", "model", m.Dir)
			window = 0
		}
	}
	return encode.Stream(os.Stdin, os.Stdout, m, encode.Options{TemplateKwargs: kw, Text: *text, ContextLength: window, Turns: *turns})
}

func cmdInspect(ctx context.Context, args []string) error {
	fs := newFlagSet("inspect")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: draftflow inspect DIR")
	}
	_, err := offline.Inspect(ctx, fs.Arg(0), os.Stdout)
	return err
}

// parseAnywhere parses fs from args with flags allowed before, between and after the positional arguments
// (`draftflow vocab DIR --run NAME`), and returns the positional arguments.
func parseAnywhere(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// limitFlags registers the length options export and vocab share.
func limitFlags(fs *flag.FlagSet) *offline.Limits {
	l := &offline.Limits{}
	fs.IntVar(&l.MaxLength, "max-length", 0, "most tokens per row, as the trainer's max length (0: no limit)")
	fs.StringVar(&l.Overlong, "overlong", offline.OverlongTruncate, "a row longer than --max-length: truncate (as the trainers do) or drop")
	fs.IntVar(&l.MinLossTokens, "min-loss-tokens", 1, "leave out rows with fewer generated tokens (counted after truncation)")
	return l
}

func cmdMergeTurns(ctx context.Context, args []string) error {
	fs := newFlagSet("merge-turns")
	var runs stringList
	fs.Var(&runs, "run", "run to merge: its directory name, or a prefix of it or of its fingerprint (repeatable; default: the only run)")
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errors.New("usage: draftflow merge-turns [--run NAME] DIR OUT_DIR")
	}
	sum, err := offline.MergeTurns(ctx, pos[0], pos[1], offline.MergeOptions{Runs: runs})
	if err != nil {
		return err
	}
	printMergeSummary(os.Stderr, sum, pos[1])
	return nil
}

// printMergeSummary says what offline.MergeTurns did.
func printMergeSummary(w io.Writer, sum offline.MergeSummary, out string) {
	fmt.Fprintf(w, "%d conversations: %d merged into one row each, %d kept as turn rows", sum.Conversations, sum.Merged, sum.Conversations-sum.Merged)
	if len(sum.Separate) > 0 {
		var parts []string
		for _, class := range slices.Sorted(maps.Keys(sum.Separate)) {
			parts = append(parts, fmt.Sprintf("%d %s", sum.Separate[class], class))
		}
		fmt.Fprintf(w, " (%s; reasons in %s)", strings.Join(parts, ", "), offline.MergeReportFile)
	}
	fmt.Fprintf(w, "; written to %s\n", out)
}

func cmdExport(ctx context.Context, args []string) error {
	fs := newFlagSet("export")
	format := fs.String("format", "specforge", "specforge or speculators")
	var runs stringList
	fs.Var(&runs, "run", "run to export: its directory name, or a prefix of it or of its fingerprint (repeatable; runs of one model and tokenizer only)")
	limits := limitFlags(fs)
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errors.New("usage: draftflow export --format specforge|speculators [--run NAME] [--max-length N [--overlong truncate|drop]] [--min-loss-tokens N] DIR OUT.jsonl")
	}
	out := pos[1]
	tmp, err := os.CreateTemp(filepath.Dir(out), ".export-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriterSize(tmp, 1<<20)
	rep, err := offline.Export(ctx, pos[0], offline.ExportOptions{Format: *format, Runs: runs, Limits: *limits}, bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Close()
	}
	if err != nil {
		tmp.Close()
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	rep.Print(os.Stderr, *limits)
	fmt.Fprintf(os.Stderr, "exported %d rows to %s\n", rep.Kept, out)
	return nil
}

func cmdVocab(ctx context.Context, args []string) error {
	fs := newFlagSet("vocab")
	var runs stringList
	fs.Var(&runs, "run", "run to count: its directory name, or a prefix of it or of its fingerprint (repeatable; runs of one model and tokenizer only)")
	draft := fs.Int("draft-vocab-size", 0, "ids the draft vocabulary keeps (required), e.g. 32000")
	modelDir := fs.String("model", "", "target model directory whose config.json gives vocab_size (default: the run's model, when it is a directory)")
	target := fs.Int("target-vocab-size", 0, "target vocabulary size, where no model directory has a config.json")
	outDir := fs.String("out", "", "write the files here (default: the run directory)")
	limits := limitFlags(fs)
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *draft <= 0 {
		return errors.New("usage: draftflow vocab DIR [--run NAME] --draft-vocab-size N [--model DIR | --target-vocab-size N] [--out DIR2] [--max-length N [--overlong truncate|drop]] [--min-loss-tokens N]")
	}
	dirs, err := shard.SelectRuns(pos[0], runs)
	if err != nil {
		return err
	}
	if *outDir == "" {
		if len(dirs) > 1 {
			return errors.New("several runs counted together: say where the files go with --out")
		}
		*outDir = dirs[0]
	}
	tsize := *target
	if tsize > 0 && *modelDir != "" {
		return errors.New("give --model or --target-vocab-size, not both")
	}
	if tsize == 0 {
		md := *modelDir
		if md == "" {
			m, err := shard.ReadManifest(dirs[0])
			if err != nil {
				return err
			}
			var cleanup func()
			md, cleanup, err = pipeline.RunModelDir(m)
			defer cleanup()
			if err != nil {
				return err
			}
		}
		if tsize, err = offline.TargetVocabSize(md); err != nil {
			return fmt.Errorf("target vocabulary size: %w (pass --model DIR or --target-vocab-size N)", err)
		}
	}
	v, err := offline.Vocab(ctx, pos[0], offline.VocabOptions{Runs: runs, DraftVocabSize: *draft, TargetVocabSize: tsize, Limits: *limits})
	if err != nil {
		return err
	}
	if err := v.Write(*outDir); err != nil {
		return err
	}
	if v.Info.Report != nil {
		v.Info.Report.Print(os.Stderr, *limits)
	}
	cover := 0.0
	if v.Info.GeneratedTokens > 0 {
		cover = float64(v.Info.SelectedTokens) / float64(v.Info.GeneratedTokens)
	}
	fmt.Fprintf(os.Stderr, "%d generated tokens (%s counts), %d distinct ids; the top %d cover %.2f%%\n", v.Info.GeneratedTokens,
		v.Info.Source, v.Info.DistinctTokens, *draft, 100*cover)
	fmt.Fprintf(os.Stderr, "wrote %s, %s (target vocabulary %d), %s and %s to %s\n", offline.D2TName, offline.T2DName, tsize,
		offline.TokenCountsName, offline.VocabInfoName, *outDir)
	return nil
}
