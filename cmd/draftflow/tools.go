package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/draftflow/draftflow/sink"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
)

// loadModelOrBundled loads dir, or the bundled sample model when dir is empty.
func loadModelOrBundled(dir string) (*tokenize.Model, func(), error) {
	cleanup := func() {}
	bundledDir := dir == ""
	if bundledDir {
		tmp, err := os.MkdirTemp("", "draftflow-model-")
		if err != nil {
			return nil, cleanup, err
		}
		cleanup = func() { os.RemoveAll(tmp) }
		if err := bundled.WriteDir(tmp); err != nil {
			return nil, cleanup, err
		}
		dir = tmp
	}
	m, err := tokenize.LoadModel(dir)
	if err == nil && bundledDir {
		m.Name = bundledModelName
	}
	return m, cleanup, err
}

// bundledModelName names the bundled sample model in records and run directories.
const bundledModelName = "draftflow-sample-bpe"

func cmdEncode(ctx context.Context, args []string) error {
	fs := newFlagSet("encode")
	modelDir := fs.String("model", "", "model directory (default: the bundled sample tokenizer)")
	kwargs := fs.String("template-kwargs", "", `extra chat-template variables as a JSON object, e.g. '{"enable_thinking": false}'`)
	text := fs.Bool("text", false, `encode each line's "text" field without a chat template`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var kw map[string]any
	if *kwargs != "" {
		if err := json.Unmarshal([]byte(*kwargs), &kw); err != nil {
			return fmt.Errorf("--template-kwargs: %w", err)
		}
	}
	m, cleanup, err := loadModelOrBundled(*modelDir)
	defer cleanup()
	if err != nil {
		return err
	}
	return encodeStream(os.Stdin, os.Stdout, m, kw, *text)
}

// encodeStream is `draftflow encode`: one output line per input line, or an error naming the line.
func encodeStream(r io.Reader, w io.Writer, m *tokenize.Model, kwargs map[string]any, textMode bool) error {
	in := bufio.NewReader(r)
	out := bufio.NewWriter(w)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for line := int64(1); ; line++ {
		data, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(data))) > 0 {
			var id string
			var ids []uint32
			if textMode {
				var row struct {
					ID   any     `json:"id"`
					Text *string `json:"text"`
				}
				if err := json.Unmarshal(data, &row); err != nil {
					return fmt.Errorf("stdin line %d: %w", line, err)
				}
				if row.Text == nil {
					return fmt.Errorf(`stdin line %d: no "text" field`, line)
				}
				if row.ID != nil {
					id = fmt.Sprint(row.ID)
				}
				ids = m.Tokenizer.Encode(*row.Text)
			} else {
				p, err := ingest.Parse("stdin", line, data, "stdin")
				if err != nil {
					return fmt.Errorf("stdin line %d: %w", line, err)
				}
				if kwargs != nil {
					p.Sampling.TemplateKwargs = kwargs
				}
				if ids, err = m.Encode(&p); err != nil {
					return fmt.Errorf("stdin line %d (id %s): %w", line, p.ID, err)
				}
				id = p.ID
			}
			if ids == nil {
				ids = []uint32{}
			}
			if err := enc.Encode(struct {
				ID       string   `json:"id"`
				InputIDs []uint32 `json:"input_ids"`
			}{id, ids}); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func cmdInspect(ctx context.Context, args []string) error {
	fs := newFlagSet("inspect")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: draftflow inspect DIR")
	}
	_, err := sink.Inspect(fs.Arg(0), os.Stdout)
	return err
}

func cmdExport(ctx context.Context, args []string) error {
	fs := newFlagSet("export")
	format := fs.String("format", "specforge", "specforge or speculators")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return errors.New("usage: draftflow export --format specforge|speculators DIR OUT.jsonl")
	}
	out := fs.Arg(1)
	tmp, err := os.CreateTemp(filepath.Dir(out), ".export-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriterSize(tmp, 1<<20)
	n, err := sink.Export(fs.Arg(0), *format, bw)
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
	fmt.Fprintf(os.Stderr, "exported %d rows to %s\n", n, out)
	return nil
}
