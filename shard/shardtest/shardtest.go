// Package shardtest makes and reads shards for the tests of the packages that use them: deterministic
// generations, rows shaped like text, run directories written as the sink writes them (without Kafka), and
// every row of an output directory read back.
package shardtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/topics"
)

// Generation returns a deterministic generation: conversation i of model models/Tiny-Chat, sampled at
// temperature temp, with a prompt of 1-60 and an output of 1-40 token ids.
func Generation(i int, temp float64) *topics.Generation {
	r := rand.New(rand.NewPCG(uint64(i), uint64(temp*1000)))
	prompt := make([]uint32, 1+r.IntN(60))
	for j := range prompt {
		prompt[j] = r.Uint32N(151000)
	}
	output := make([]uint32, 1+r.IntN(40))
	for j := range output {
		output[j] = r.Uint32N(151000)
	}
	t := temp
	fr := "stop"
	if i%5 == 0 {
		fr = "length"
	}
	return &topics.Generation{
		ID: fmt.Sprintf("conv-%05d", i), Dataset: fmt.Sprintf("ds%d", i%3),
		Sampling: topics.Sampling{MaxNewTokens: 64, Temperature: &t, Lane: "short"},
		Source:   topics.Source{File: "sample.jsonl", Line: int64(i + 1)},
		Model:    "models/Tiny-Chat", TokenizerHash: "tok-1",
		Meta:      topics.GenerationMeta{FinishReason: fr, Endpoint: "http://sim:30000"},
		PromptIDs: prompt, OutputIDs: output,
	}
}

// RowOf is the shard row of a generation, as the sink writes it (stop reason end unless the generation says
// otherwise; no reply; its origin, generated when empty).
func RowOf(g *topics.Generation) *shard.WriteRow {
	stop := g.StopReason
	if stop == "" {
		stop = topics.StopEnd
	}
	return &shard.WriteRow{ID: g.ID, Dataset: g.Dataset, FinishReason: g.Meta.FinishReason, Endpoint: g.Meta.Endpoint,
		StopReason: stop, Turn: int32(g.Turn), Prompt: g.PromptIDs, Output: g.OutputIDs, Origin: topics.OriginOf(g.Origin)}
}

// Flush writes gens into the output directory dir as one flush of the sink would, consumed at offsets first,
// first+1, ... of partition 0 of topic "generated": one shard per run (shard.RunOf) of its rows in order, with
// row groups of at most 4 rows, then each run's manifest and token counts. Unlike the sink it neither
// deduplicates nor keeps a checkpoint.
func Flush(t testing.TB, dir string, first int64, gens []*topics.Generation) {
	t.Helper()
	var order []shard.RunInfo
	rows := map[string][]*shard.WriteRow{}
	for _, g := range gens {
		run := shard.RunOf(g)
		if _, ok := rows[run.Fingerprint]; !ok {
			order = append(order, run)
		}
		rows[run.Fingerprint] = append(rows[run.Fingerprint], RowOf(g))
	}
	o := shard.Origin{Topic: "generated", FirstOffset: first, LastOffset: first + int64(len(gens)) - 1}
	for _, run := range order {
		if err := appendShard(dir, run, o, rows[run.Fingerprint]); err != nil {
			t.Fatal(err)
		}
	}
}

// appendShard writes rows as a shard of the run under dir and adds it to the run's manifest and token counts.
func appendShard(dir string, run shard.RunInfo, o shard.Origin, rows []*shard.WriteRow) error {
	rd := filepath.Join(dir, run.DirName())
	if err := os.MkdirAll(rd, 0o755); err != nil {
		return err
	}
	m, err := shard.ReadManifest(rd)
	if errors.Is(err, fs.ErrNotExist) {
		m, err = &shard.Manifest{FormatVersion: shard.FormatVersion, Run: run, Schema: shard.Columns()}, nil
	}
	if err != nil {
		return err
	}
	counts, _, err := shard.LoadCounts(context.Background(), rd, m)
	if err != nil {
		return err
	}
	entry, err := shard.WriteFile(filepath.Join(rd, o.Name()), run, o, rows, shard.WriteOptions{RowGroupRows: 4})
	if err != nil {
		return err
	}
	entry.File = o.Name()
	m.Shards = append(m.Shards, entry)
	if err := shard.WriteManifest(rd, m); err != nil {
		return err
	}
	counts.AddOutputs(rows)
	return shard.WriteCounts(rd, m, counts)
}

// ReadRows reads every row of every run under dir (by manifest) into copies, keyed by run directory name.
func ReadRows(t testing.TB, dir string) map[string][]shard.Row {
	t.Helper()
	runs, err := shard.RunDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]shard.Row{}
	for _, rd := range runs {
		m, err := shard.ReadManifest(rd)
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range m.Shards {
			err := shard.ScanFile(context.Background(), filepath.Join(rd, sh.File), nil, func(r *shard.Row) error {
				c := *r
				c.InputIDs = slices.Clone(r.InputIDs)
				c.LossMask = slices.Clone(r.LossMask)
				out[filepath.Base(rd)] = append(out[filepath.Base(rd)], c)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

var wordRE = regexp.MustCompile(`[A-Za-z]+|[0-9]+|[^\sA-Za-z0-9]|\s+`)

var (
	textOnce sync.Once
	textToks []uint32
)

// textTokens tokenizes the Go standard library's net/http source into words, numbers, punctuation and
// whitespace runs, and numbers each distinct token by frequency rank (most frequent first, as BPE vocabularies
// roughly are): a stand-in for real text token streams, with their repetition and sequence structure.
func textTokens() []uint32 {
	textOnce.Do(func() {
		var files []string
		filepath.WalkDir(filepath.Join(runtime.GOROOT(), "src", "net", "http"), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
				files = append(files, p)
			}
			return nil
		})
		sort.Strings(files)
		var toks []string
		for _, f := range files {
			b, _ := os.ReadFile(f)
			toks = append(toks, wordRE.FindAllString(string(b), -1)...)
		}
		freq := map[string]int{}
		for _, w := range toks {
			freq[w]++
		}
		words := make([]string, 0, len(freq))
		for w := range freq {
			words = append(words, w)
		}
		sort.Slice(words, func(i, j int) bool {
			return freq[words[i]] > freq[words[j]] || freq[words[i]] == freq[words[j]] && words[i] < words[j]
		})
		id := map[string]uint32{}
		for i, w := range words {
			id[w] = uint32(i + 100)
		}
		textToks = make([]uint32, len(toks))
		for i, w := range toks {
			textToks[i] = id[w]
		}
	})
	return textToks
}

// TextRows returns n rows cut from Go source tokenized like text (each distinct word, number, punctuation
// mark and whitespace run numbered by frequency rank): prompts of 200-2,000 tokens, completions of 100-3,000.
func TextRows(n int) []*shard.WriteRow {
	toks := textTokens()
	rows := make([]*shard.WriteRow, 0, n)
	pos := 0
	for i := 0; i < n; i++ {
		np, no := 200+(i*7919)%1800, 100+(i*104729)%2900
		take := func(k int) []uint32 {
			out := make([]uint32, k)
			for j := range out {
				out[j] = toks[pos%len(toks)]
				pos++
			}
			return out
		}
		rows = append(rows, &shard.WriteRow{ID: "conv-" + strconv.Itoa(i), Dataset: "sharegpt", FinishReason: "stop", Endpoint: "http://x",
			Prompt: take(np), Output: take(no)})
	}
	return rows
}
