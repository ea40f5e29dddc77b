package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
)

// Export formats.
const (
	// FormatSpecForge writes rows SpecForge's pre-tokenized loader accepts: {"id", "input_ids", "loss_mask"},
	// both lists 1-D integers, loss_mask 0/1.
	FormatSpecForge = "specforge"
	// FormatSpeculators writes vllm-project/speculators regeneration rows: {"id": "<id>_gen<turn>", "primary_id",
	// "input_ids", "loss_mask", "metadata": {idx, finish_reason, usage, endpoint, sampling_params, model,
	// dataset, turn}}. speculators' "text" is not written: the sink holds tokens only.
	FormatSpeculators = "speculators"
)

// Export writes every row under dir (a run directory, or a sink output directory: all its runs, in directory
// order, each in manifest order) to w as JSON lines in the given format, and returns the number of rows. Each
// row is checked like Inspect checks it before it is written.
func Export(dir, format string, w io.Writer) (int, error) {
	if format != FormatSpecForge && format != FormatSpeculators {
		return 0, fmt.Errorf("export: unknown format %q (want %s or %s)", format, FormatSpecForge, FormatSpeculators)
	}
	runs, err := RunDirs(dir)
	if err != nil {
		return 0, fmt.Errorf("export: %w", err)
	}
	if len(runs) == 0 {
		return 0, fmt.Errorf("export: no run (no %s) under %s", ManifestName, dir)
	}
	n := 0
	buf := make([]byte, 0, 1<<16)
	for _, rd := range runs {
		m, err := ReadManifest(rd)
		if err != nil {
			return n, fmt.Errorf("export: %w", err)
		}
		sampling, err := json.Marshal(m.Run.Sampling)
		if err != nil {
			return n, err
		}
		model, _ := json.Marshal(m.Run.Model)
		for _, sh := range m.Shards {
			sf, err := openShard(filepath.Join(rd, sh.File))
			if err != nil {
				return n, fmt.Errorf("export: %w", err)
			}
			err = sf.scan(context.Background(), nil, func(r *ShardRow) error {
				if msg := checkRow(r); msg != "" {
					return fmt.Errorf("%s: row %q: %s", sh.File, r.ID, msg)
				}
				buf = buf[:0]
				switch format {
				case FormatSpecForge:
					buf = append(buf, `{"id":`...)
					buf = appendJSONString(buf, r.ID)
					buf = appendLists(buf, r)
				case FormatSpeculators:
					buf = append(buf, `{"id":`...)
					buf = appendJSONString(buf, r.ID+"_gen"+strconv.Itoa(int(r.Turn)))
					buf = append(buf, `,"primary_id":`...)
					buf = appendJSONString(buf, r.ID)
					buf = appendLists(buf, r)
					buf = append(buf, `,"metadata":{"idx":`...)
					buf = strconv.AppendInt(buf, int64(n), 10)
					buf = append(buf, `,"finish_reason":`...)
					buf = appendJSONString(buf, r.FinishReason)
					buf = append(buf, `,"usage":{"prompt_tokens":`...)
					buf = strconv.AppendInt(buf, int64(r.PromptLen), 10)
					buf = append(buf, `,"completion_tokens":`...)
					buf = strconv.AppendInt(buf, int64(r.CompletionLen), 10)
					buf = append(buf, `},"endpoint":`...)
					buf = appendJSONString(buf, r.Endpoint)
					buf = append(buf, `,"sampling_params":`...)
					buf = append(buf, sampling...)
					buf = append(buf, `,"model":`...)
					buf = append(buf, model...)
					buf = append(buf, `,"dataset":`...)
					buf = appendJSONString(buf, r.Dataset)
					buf = append(buf, `,"turn":`...)
					buf = strconv.AppendInt(buf, int64(r.Turn), 10)
					buf = append(buf, '}')
				}
				buf = append(buf, "}\n"...)
				if _, err := w.Write(buf); err != nil {
					return err
				}
				n++
				return nil
			})
			sf.Close()
			if err != nil {
				return n, fmt.Errorf("export: %w", err)
			}
		}
	}
	return n, nil
}

// appendLists appends ,"input_ids":[...],"loss_mask":[...].
func appendLists(buf []byte, r *ShardRow) []byte {
	buf = append(buf, `,"input_ids":[`...)
	for i, id := range r.InputIDs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(id), 10)
	}
	buf = append(buf, `],"loss_mask":[`...)
	for i, v := range r.LossMask {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '0'+v)
	}
	return append(buf, ']')
}

func appendJSONString(buf []byte, s string) []byte {
	b, _ := json.Marshal(s)
	return append(buf, b...)
}
