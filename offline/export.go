package offline

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/topics"
)

// Export formats.
const (
	// FormatSpecForge writes rows SpecForge's pre-tokenized loader accepts: {"id", "input_ids", "loss_mask"},
	// both lists 1-D integers, loss_mask 0/1.
	FormatSpecForge = "specforge"
	// FormatSpeculators writes vllm-project/speculators regeneration rows: {"id": "<id>_gen<turn>", "primary_id",
	// "input_ids", "loss_mask", "metadata": {idx, finish_reason, usage, endpoint, sampling_params, model,
	// dataset, turn, origin (topics.Origins), truncated_from (the row's length before --max-length cut it, only
	// then)}}. speculators' "text" is not written: the sink holds tokens only.
	FormatSpeculators = "speculators"
)

// ExportOptions says what Export writes.
type ExportOptions struct {
	// Format is FormatSpecForge or FormatSpeculators.
	Format string
	// Runs names the runs to export (see shard.SelectRuns); empty: the only run under the directory.
	Runs []string
	// Limits are the length rules applied to each row.
	Limits Limits
}

// Export writes the rows of the selected runs under dir (each run in manifest order) to w as JSON lines in
// the given format, after applying the length limits, and reports what it kept, truncated and dropped. Each
// row is checked like Inspect checks it before it is written. It stops with ctx's error once ctx ends.
func Export(ctx context.Context, dir string, opts ExportOptions, w io.Writer) (LimitReport, error) {
	var rep LimitReport
	if opts.Format != FormatSpecForge && opts.Format != FormatSpeculators {
		return rep, fmt.Errorf("export: unknown format %q (want %s or %s)", opts.Format, FormatSpecForge, FormatSpeculators)
	}
	if err := opts.Limits.Validate(); err != nil {
		return rep, fmt.Errorf("export: %w", err)
	}
	runs, err := shard.SelectRuns(dir, opts.Runs)
	if err != nil {
		return rep, fmt.Errorf("export: %w", err)
	}
	for _, rd := range runs {
		if err := exportRun(ctx, rd, opts, w, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// exportRun writes the rows of the run directory rd, as Export.
func exportRun(ctx context.Context, rd string, opts ExportOptions, w io.Writer, rep *LimitReport) error {
	m, err := shard.ReadManifest(rd)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	enc, err := newRowEncoder(opts.Format, m.Run)
	if err != nil {
		return err
	}
	for _, sh := range m.Shards {
		sf, err := shard.Open(filepath.Join(rd, sh.File))
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		err = sf.Scan(ctx, nil, func(r *shard.Row) error {
			if err := r.Validate(m.Merged); err != nil {
				return fmt.Errorf("%s: row %q: %v", sh.File, r.ID, err)
			}
			ids, mask, fate := opts.Limits.apply(r)
			rep.add(r, ids, fate)
			if fate.dropped() {
				return nil
			}
			_, err := w.Write(enc.encode(r, ids, mask, fate, rep.Kept-1))
			return err
		})
		sf.Close()
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	return nil
}

// rowEncoder encodes rows of one run as JSON lines of one format.
type rowEncoder struct {
	format          string
	sampling, model []byte // the run's sampling settings and model, in JSON
	buf             []byte
}

func newRowEncoder(format string, run shard.RunInfo) (*rowEncoder, error) {
	sampling, err := json.Marshal(run.Sampling)
	if err != nil {
		return nil, err
	}
	model, _ := json.Marshal(run.Model) // a string always encodes
	return &rowEncoder{format: format, sampling: sampling, model: model, buf: make([]byte, 0, 1<<16)}, nil
}

// encode returns the JSON line of row r, whose tokens after the limits are ids and mask, the idx-th row
// written. The result is valid until the next call.
func (e *rowEncoder) encode(r *shard.Row, ids []int32, mask []uint8, fate rowFate, idx int64) []byte {
	buf := e.buf[:0]
	switch e.format {
	case FormatSpecForge:
		buf = append(buf, `{"id":`...)
		buf = appendJSONString(buf, r.ID)
		buf = appendLists(buf, ids, mask)
	case FormatSpeculators:
		buf = append(buf, `{"id":`...)
		buf = appendJSONString(buf, r.ID+"_gen"+strconv.Itoa(int(r.Turn)))
		buf = append(buf, `,"primary_id":`...)
		buf = appendJSONString(buf, r.ID)
		buf = appendLists(buf, ids, mask)
		buf = append(buf, `,"metadata":{"idx":`...)
		buf = strconv.AppendInt(buf, idx, 10)
		buf = append(buf, `,"finish_reason":`...)
		buf = appendJSONString(buf, r.FinishReason)
		buf = append(buf, `,"usage":{"prompt_tokens":`...)
		buf = strconv.AppendInt(buf, int64(r.PromptLen), 10)
		buf = append(buf, `,"completion_tokens":`...)
		buf = strconv.AppendInt(buf, int64(r.CompletionLen), 10)
		buf = append(buf, `},"endpoint":`...)
		buf = appendJSONString(buf, r.Endpoint)
		buf = append(buf, `,"sampling_params":`...)
		buf = append(buf, e.sampling...)
		buf = append(buf, `,"model":`...)
		buf = append(buf, e.model...)
		buf = append(buf, `,"dataset":`...)
		buf = appendJSONString(buf, r.Dataset)
		buf = append(buf, `,"turn":`...)
		buf = strconv.AppendInt(buf, int64(r.Turn), 10)
		buf = append(buf, `,"origin":`...)
		buf = appendJSONString(buf, topics.OriginOf(r.Origin))
		if fate == rowTruncated {
			buf = append(buf, `,"truncated_from":`...)
			buf = strconv.AppendInt(buf, int64(len(r.InputIDs)), 10)
		}
		buf = append(buf, '}')
	}
	buf = append(buf, "}\n"...)
	e.buf = buf
	return buf
}

// appendLists appends ,"input_ids":[...],"loss_mask":[...].
func appendLists(buf []byte, ids []int32, mask []uint8) []byte {
	buf = append(buf, `,"input_ids":[`...)
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(id), 10)
	}
	buf = append(buf, `],"loss_mask":[`...)
	for i, v := range mask {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '0'+v)
	}
	return append(buf, ']')
}

func appendJSONString(buf []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always encodes
	return append(buf, b...)
}
