package offline

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/topics"
)

// MergeReportFile is the file, in each merged run directory, that says for every conversation whether its
// turns were merged into one row and, where not, why (one JSON object per line: id, turns, merged, reason).
const MergeReportFile = "merge_report.jsonl"

// MergeOptions configures MergeTurns.
type MergeOptions struct {
	// Runs selects run directories by name (empty: the only run, as shard.SelectRuns).
	Runs []string
	// RotateRows is the most rows per output shard (default shard.DefaultShardRows).
	RotateRows int
	// TempDir holds the temporary index of rows by conversation (default os.TempDir()).
	TempDir string
}

// MergeSummary counts what MergeTurns did over all runs.
type MergeSummary struct {
	// Conversations is how many conversations the runs hold; Merged of them became one row each.
	Conversations, Merged int64
	// Separate counts the conversations whose turns stay separate rows, by reason class: rewritten (a later
	// turn's prompt does not start with the earlier turn's prompt and output: the chat template rewrote the
	// history, typically dropping earlier reasoning), incomplete (turns missing, or a turn that is not the
	// last did not continue), single (one turn: nothing to merge).
	Separate map[string]int64
}

// MergeTurns writes, for each selected run of dir, a run directory under out with one row per conversation
// where that is exact: the rows of turns 0..n merge when, for every k < n, turn k continued and turn k+1's
// prompt ids begin with turn k's prompt and output ids — the rendering of the history reproduces every
// earlier turn's tokens exactly, checked on the ids, not assumed. The merged row's input_ids are turn n's
// prompt and output; its loss_mask is 1 on every regenerated span (each turn's output) and 0 elsewhere
// (prompts, tool results, user messages); prompt_len and completion_len are turn n's, turn is n and
// stop_reason turn n's, and the run's manifest says Merged. Other conversations keep their
// turn rows, and MergeReportFile records why. Memory stays flat in the run's size: rows are grouped by
// conversation in a temporary on-disk index. It stops with ctx's error once ctx ends.
func MergeTurns(ctx context.Context, dir, out string, opts MergeOptions) (MergeSummary, error) {
	sum := MergeSummary{Separate: map[string]int64{}}
	if opts.RotateRows <= 0 {
		opts.RotateRows = shard.DefaultShardRows
	}
	runs, err := shard.SelectRuns(dir, opts.Runs)
	if err != nil {
		return sum, fmt.Errorf("merge: %w", err)
	}
	for _, rd := range runs {
		if err := mergeRun(ctx, rd, out, opts, &sum); err != nil {
			return sum, fmt.Errorf("merge %s: %w", filepath.Base(rd), err)
		}
	}
	return sum, nil
}

var mergeRows = []byte("rows")

// mergeBatch is how many rows one transaction of the temporary index puts.
const mergeBatch = 4096

// mergeKey is a row's key in the temporary index: its id, then its turn as 4 big-endian bytes, so that a
// cursor visits a conversation's turns in order.
func mergeKey(id string, turn int32) ([]byte, error) {
	if len(id)+4 > bolt.MaxKeySize {
		return nil, fmt.Errorf("row id of %d bytes is too long to merge", len(id))
	}
	return binary.BigEndian.AppendUint32(append(make([]byte, 0, len(id)+4), id...), uint32(turn)), nil
}

// encodeMergeRow encodes a row for the temporary index: prompt length, stop reason, dataset, finish reason,
// endpoint, origin, then the ids.
func encodeMergeRow(r *shard.Row) []byte {
	b := make([]byte, 0, 10+len(r.StopReason)+len(r.Dataset)+len(r.FinishReason)+len(r.Endpoint)+len(r.Origin)+4*len(r.InputIDs))
	b = binary.AppendUvarint(b, uint64(r.PromptLen))
	for _, s := range []string{r.StopReason, r.Dataset, r.FinishReason, r.Endpoint, r.Origin} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, id := range r.InputIDs {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	return b
}

type mergeTurn struct {
	turn                                          int32
	promptLen                                     int
	stopReason, dataset, finish, endpoint, origin string
	ids                                           []uint32
}

func decodeMergeRow(turn int32, b []byte) (mergeTurn, error) {
	t := mergeTurn{turn: turn}
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return t, errors.New("corrupt temporary row")
	}
	t.promptLen, b = int(n), b[w:]
	var strs [5]string
	for i := range strs {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < n {
			return t, errors.New("corrupt temporary row")
		}
		strs[i], b = string(b[w:w+int(n)]), b[w+int(n):]
	}
	t.stopReason, t.dataset, t.finish, t.endpoint, t.origin = strs[0], strs[1], strs[2], strs[3], strs[4]
	t.ids = make([]uint32, len(b)/4)
	for i := range t.ids {
		t.ids[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return t, nil
}

// mergeRun merges the run directory rd into a run directory of the same name under out.
func mergeRun(ctx context.Context, rd, out string, opts MergeOptions, sum *MergeSummary) error {
	m, err := shard.ReadManifest(rd)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(opts.TempDir, "draftflow-merge-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	db, err := bolt.Open(filepath.Join(tmp, "rows.bolt"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := indexRows(ctx, db, rd, m); err != nil {
		return err
	}
	runOut := filepath.Join(out, filepath.Base(rd))
	if err := os.MkdirAll(runOut, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(runOut, shard.ManifestName)); err == nil {
		return fmt.Errorf("%s already holds a run; merge into a new directory", runOut)
	}
	report, err := os.Create(filepath.Join(runOut, MergeReportFile))
	if err != nil {
		return err
	}
	defer report.Close()
	w := &mergeWriter{dir: runOut, run: m.Run, rotate: opts.RotateRows, sum: sum, report: json.NewEncoder(report),
		manifest: &shard.Manifest{FormatVersion: shard.FormatVersion, Run: m.Run, Schema: shard.Columns(), Merged: true}}
	err = db.View(func(tx *bolt.Tx) error { return w.conversations(ctx, tx.Bucket(mergeRows)) })
	if err == nil {
		err = w.flush()
	}
	if err != nil {
		return err
	}
	if err := report.Sync(); err != nil {
		return err
	}
	return shard.WriteManifest(runOut, w.manifest)
}

// indexRows puts every row of the run directory rd (manifest m) into db, keyed by (id, turn) (mergeKey).
func indexRows(ctx context.Context, db *bolt.DB, rd string, m *shard.Manifest) error {
	var batch [][2][]byte
	put := func() error {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(mergeRows)
			if err != nil {
				return err
			}
			for _, kv := range batch {
				if err := b.Put(kv[0], kv[1]); err != nil {
					return err
				}
			}
			return nil
		})
		batch = batch[:0]
		return err
	}
	for _, sh := range m.Shards {
		sf, err := shard.Open(filepath.Join(rd, sh.File))
		if err != nil {
			return err
		}
		err = sf.Scan(ctx, nil, func(r *shard.Row) error {
			k, err := mergeKey(r.ID, r.Turn)
			if err != nil {
				return err
			}
			batch = append(batch, [2][]byte{k, encodeMergeRow(r)})
			if len(batch) >= mergeBatch {
				return put()
			}
			return nil
		})
		sf.Close()
		if err == nil {
			err = put()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", sh.File, err)
		}
	}
	return nil
}

// mergeWriter writes the merged run: its shards, its manifest and its report.
type mergeWriter struct {
	dir      string
	run      shard.RunInfo
	rotate   int
	sum      *MergeSummary
	report   *json.Encoder
	manifest *shard.Manifest
	pending  []*shard.WriteRow
}

// conversations reads the index bucket b (nil: no rows) one conversation at a time, in id order, and writes
// each (emit).
func (w *mergeWriter) conversations(ctx context.Context, b *bolt.Bucket) error {
	if b == nil {
		return nil
	}
	var cur string
	var turns []mergeTurn
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		id, turn := string(k[:len(k)-4]), int32(binary.BigEndian.Uint32(k[len(k)-4:]))
		if id != cur && len(turns) > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := w.emit(cur, turns); err != nil {
				return err
			}
			turns = nil
		}
		cur = id
		t, err := decodeMergeRow(turn, v)
		if err != nil {
			return err
		}
		turns = append(turns, t)
	}
	if len(turns) > 0 {
		return w.emit(cur, turns)
	}
	return nil
}

// emit writes one conversation: its merged row, or its turn rows and the reason in the report.
func (w *mergeWriter) emit(id string, turns []mergeTurn) error {
	w.sum.Conversations++
	merged, class, reason := mergeConversation(id, turns)
	line := map[string]any{"id": id, "turns": len(turns), "merged": merged != nil}
	if merged != nil {
		w.sum.Merged++
		w.pending = append(w.pending, merged)
	} else {
		w.sum.Separate[class]++
		line["reason"] = reason
		for _, t := range turns {
			w.pending = append(w.pending, &shard.WriteRow{ID: id, Dataset: t.dataset, FinishReason: t.finish, Endpoint: t.endpoint,
				StopReason: t.stopReason, Origin: t.origin, Turn: t.turn, Prompt: t.ids[:t.promptLen], Output: t.ids[t.promptLen:]})
		}
	}
	if err := w.report.Encode(line); err != nil {
		return err
	}
	if len(w.pending) >= w.rotate {
		return w.flush()
	}
	return nil
}

// flush writes the pending rows as the run's next shard.
func (w *mergeWriter) flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	n := int64(len(w.manifest.Shards))
	o := shard.Origin{Topic: "merged", Partition: 0, FirstOffset: n, LastOffset: n}
	entry, err := shard.WriteFile(filepath.Join(w.dir, o.Name()), w.run, o, w.pending, shard.WriteOptions{})
	if err != nil {
		return err
	}
	entry.File = o.Name()
	w.manifest.Shards = append(w.manifest.Shards, entry)
	w.pending = w.pending[:0]
	return nil
}

// mergeConversation returns the merged row of a conversation's turns (in turn order), or nil with the reason
// class and the reason they stay separate.
func mergeConversation(id string, turns []mergeTurn) (*shard.WriteRow, string, string) {
	if len(turns) == 1 {
		return nil, "single", "one turn: nothing to merge"
	}
	for i, t := range turns {
		if t.turn != turns[0].turn+int32(i) {
			return nil, "incomplete", fmt.Sprintf("turns %d..%d with turn %d missing", turns[0].turn, turns[len(turns)-1].turn, turns[0].turn+int32(i))
		}
	}
	if turns[0].turn != 0 {
		return nil, "incomplete", fmt.Sprintf("the first turn in the run is %d, not 0", turns[0].turn)
	}
	last := turns[len(turns)-1]
	mask := make([]uint8, len(last.ids))
	for i, t := range turns[:len(turns)-1] {
		next := turns[i+1]
		if t.stopReason != topics.StopContinued {
			return nil, "incomplete", fmt.Sprintf("turn %d ended the conversation (%s) but turn %d is in the run", t.turn, t.stopReason, next.turn)
		}
		prefix := next.ids[:next.promptLen]
		if len(prefix) < len(t.ids) || !slices.Equal(prefix[:len(t.ids)], t.ids) {
			at := 0
			for at < len(t.ids) && at < len(prefix) && prefix[at] == t.ids[at] {
				at++
			}
			where := "in its prompt"
			if at >= t.promptLen {
				where = "in its reply, " + strconv.Itoa(at-t.promptLen) + " tokens in"
			}
			return nil, "rewritten", fmt.Sprintf("turn %d's prompt does not begin with turn %d's prompt and output: they differ at token %d (%s); the chat template renders the earlier turn differently in the history (most drop earlier reasoning)",
				next.turn, t.turn, at, where)
		}
		for j := t.promptLen; j < len(t.ids); j++ {
			mask[j] = 1
		}
	}
	for j := last.promptLen; j < len(last.ids); j++ {
		mask[j] = 1
	}
	return &shard.WriteRow{ID: id, Dataset: last.dataset, FinishReason: last.finish, Endpoint: last.endpoint, StopReason: last.stopReason,
		Origin: last.origin, Turn: last.turn, Prompt: last.ids[:last.promptLen], Output: last.ids[last.promptLen:], Mask: mask}, "", ""
}
