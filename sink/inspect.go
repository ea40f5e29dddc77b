package sink

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/draftflow/draftflow/internal/durable"
	"github.com/draftflow/draftflow/internal/idset"
	"github.com/draftflow/draftflow/sink/features"
)

// Summary is what Inspect found.
type Summary struct {
	// Runs holds one entry per run directory, sorted by directory.
	Runs []RunSummary
	// Shards, Rows, Tokens, PromptTokens, CompletionTokens and Bytes are totals over all runs, as read from
	// the shards themselves.
	Shards           int
	Rows             int64
	Tokens           int64
	PromptTokens     int64
	CompletionTokens int64
	Bytes            int64
	// Histogram counts rows by sequence length (len(input_ids)) in power-of-two buckets.
	Histogram []Bucket
	// Problems lists every inconsistency found; Inspect returns an error when it is not empty.
	Problems []string
	// FeatureFiles, FeatureRows, FeatureTokens and FeatureRowsMissing count the feature files of the runs
	// that have them (stages/capture), the rows with features, their tokens and the rows listed without.
	FeatureFiles       int
	FeatureRows        int64
	FeatureTokens      int64
	FeatureRowsMissing int64
	// Journaled counts the records in the sink's journal (JournalDir) past its shards: rows of a sink that did
	// not stop cleanly, written into shards when it next starts.
	Journaled int64
}

// RunSummary describes one run directory.
type RunSummary struct {
	// Dir is the run directory.
	Dir string
	// Run is the run identity from its manifest.
	Run RunInfo
	// Totals as read from the shards.
	Totals Totals
	// FinishReasons counts rows by finish_reason.
	FinishReasons map[string]int64
	// Features is whether the run has feature files (it was captured); Missing lists the first rows listed
	// without features (features.Index.Missing), with why.
	Features bool
	Missing  []features.MissingRow
}

// Bucket is one histogram bucket: rows whose sequence length is in [Min, Max).
type Bucket struct {
	Min, Max int64
	Rows     int64
}

// Inspect validates every shard under dir (a run directory, or a sink output directory holding runs) against
// its manifest and the schema: the manifest's files exist with its sizes and checksums and nothing else is
// published, every row has len(loss_mask) = len(input_ids) = prompt_len + completion_len with loss_mask 0
// before prompt_len (in a merged run, MergeTurns, 0 or 1) and 1 after, (id, turn) is unique per run, and the run's generated-token counts
// (TokenCountsFile) are those of its rows. It writes a report to w and returns an
// error when anything is wrong.
func Inspect(dir string, w io.Writer) (Summary, error) {
	var sum Summary
	runs, err := RunDirs(dir)
	if err != nil {
		return sum, fmt.Errorf("inspect: %w", err)
	}
	if len(runs) == 0 {
		return sum, fmt.Errorf("inspect: no run (no %s) under %s", ManifestName, dir)
	}
	hist := map[int]int64{}
	for _, rd := range runs {
		rs := inspectRun(rd, &sum, hist)
		sum.Runs = append(sum.Runs, rs)
	}
	keys := make([]int, 0, len(hist))
	for k := range hist {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		lo := int64(0)
		if k > 0 {
			lo = 1 << (k - 1)
		}
		sum.Histogram = append(sum.Histogram, Bucket{Min: lo, Max: 1 << k, Rows: hist[k]})
	}
	sum.Journaled = JournalPending(dir)
	report(w, &sum)
	if len(sum.Problems) > 0 {
		return sum, fmt.Errorf("inspect: %d problem(s), first: %s", len(sum.Problems), sum.Problems[0])
	}
	return sum, nil
}

// inspectRun checks one run directory, adding to sum and hist.
func inspectRun(rd string, sum *Summary, hist map[int]int64) RunSummary {
	rs := RunSummary{Dir: rd, FinishReasons: map[string]int64{}}
	problem := func(format string, args ...any) {
		sum.Problems = append(sum.Problems, rd+": "+fmt.Sprintf(format, args...))
	}
	m, err := ReadManifest(rd)
	if err != nil {
		problem("%v", err)
		return rs
	}
	rs.Run = m.Run
	var want Totals
	listed := map[string]bool{}
	for _, sh := range m.Shards {
		want.add(sh)
		if listed[sh.File] {
			problem("manifest lists %s twice", sh.File)
		}
		listed[sh.File] = true
	}
	if want != m.Totals {
		problem("manifest totals %+v do not add up to its shards %+v", m.Totals, want)
	}
	ents, err := os.ReadDir(rd)
	if err != nil {
		problem("%v", err)
		return rs
	}
	for _, e := range ents {
		if _, ok := parseShardName(e.Name()); ok && !listed[e.Name()] {
			problem("shard %s is not in the manifest", e.Name())
		}
	}
	// The (id, turn) keys seen so far, to find a row in two shards: in a temporary file, so inspecting a run
	// of millions of rows does not hold them all in memory.
	seen, err := idset.New("")
	if err != nil {
		problem("duplicate check: %v", err)
		return rs
	}
	defer seen.Close()
	recount := &countTable{}
	fx := newFeatureCheck(rd, ents, listed, problem)
	rs.Features = fx.used
	for shardIdx, sh := range m.Shards {
		var refs []features.RowRef
		path := filepath.Join(rd, sh.File)
		digest, size, err := durable.FileSHA256(path)
		if err != nil {
			problem("%v", err)
			continue
		}
		if size != sh.Bytes {
			problem("%s is %d bytes, manifest says %d", sh.File, size, sh.Bytes)
		}
		if digest != sh.SHA256 {
			problem("%s has sha256 %s, manifest says %s", sh.File, digest, sh.SHA256)
		}
		sf, err := openShard(path)
		if err != nil {
			problem("%v", err)
			continue
		}
		var info RunInfo
		if err := json.Unmarshal([]byte(sf.meta(MetaRun)), &info); err != nil || info.Fingerprint != m.Run.Fingerprint {
			problem("%s belongs to run %q, manifest is run %q", sh.File, info.Fingerprint, m.Run.Fingerprint)
		}
		var st Totals
		st.Shards = 1
		st.Bytes = size
		err = sf.scan(context.Background(), nil, func(r *ShardRow) error {
			st.Rows++
			if fx.used {
				refs = append(refs, features.RowRef{ID: r.ID, Turn: int(r.Turn), Tokens: len(r.InputIDs)})
			}
			n := int64(len(r.InputIDs))
			st.Tokens += n
			st.PromptTokens += int64(r.PromptLen)
			st.CompletionTokens += int64(r.CompletionLen)
			if msg := checkRow(r, m.Merged); msg != "" {
				if len(sum.Problems) < 1000 {
					problem("%s: row %q: %s", sh.File, r.ID, msg)
				}
			}
			k := r.ID + "\x00" + strconv.Itoa(int(r.Turn))
			prev, dup, err := seen.Get(k)
			switch {
			case err != nil:
				return fmt.Errorf("duplicate check: %w", err)
			case dup:
				i, _ := binary.Uvarint(prev)
				problem("%s: id %q turn %d is also in %s", sh.File, r.ID, r.Turn, m.Shards[min(int(i), len(m.Shards)-1)].File)
			default:
				if err := seen.Put(k, binary.AppendUvarint(nil, uint64(shardIdx))); err != nil {
					return fmt.Errorf("duplicate check: %w", err)
				}
			}
			if r.PromptLen >= 0 && int(r.PromptLen) <= len(r.InputIDs) {
				for _, id := range r.InputIDs[r.PromptLen:] {
					recount.add(id, 1)
				}
			}
			rs.FinishReasons[r.FinishReason]++
			hist[bits.Len64(uint64(n))]++
			return nil
		})
		sf.Close()
		if err != nil {
			problem("%s: %v", sh.File, err)
			continue
		}
		fx.shard(sh.File, refs, sum, &rs)
		if st.Rows != sh.Rows || st.Tokens != sh.Tokens || st.PromptTokens != sh.PromptTokens || st.CompletionTokens != sh.CompletionTokens {
			problem("%s holds %d rows / %d tokens, manifest says %d / %d", sh.File, st.Rows, st.Tokens, sh.Rows, sh.Tokens)
		}
		rs.Totals.Shards += st.Shards
		rs.Totals.Rows += st.Rows
		rs.Totals.Tokens += st.Tokens
		rs.Totals.PromptTokens += st.PromptTokens
		rs.Totals.CompletionTokens += st.CompletionTokens
		rs.Totals.Bytes += st.Bytes
	}
	if counts, err := RunTokenCounts(rd); err != nil {
		problem("%s: %v", TokenCountsFile, err)
	} else if !slices.Equal(counts, recount.counts()) {
		problem("%s does not match the generated tokens of the rows", TokenCountsFile)
	}
	sum.Shards += rs.Totals.Shards
	sum.Rows += rs.Totals.Rows
	sum.Tokens += rs.Totals.Tokens
	sum.PromptTokens += rs.Totals.PromptTokens
	sum.CompletionTokens += rs.Totals.CompletionTokens
	sum.Bytes += rs.Totals.Bytes
	return rs
}

// checkRow returns what is wrong with a row's token columns, or "". In a merged run (Manifest.Merged) the
// prompt part of the loss mask may hold the earlier turns' ones.
func checkRow(r *ShardRow, merged bool) string {
	switch {
	case r.ID == "":
		return "empty id"
	case r.PromptLen < 0 || r.CompletionLen < 0:
		return fmt.Sprintf("negative lengths %d/%d", r.PromptLen, r.CompletionLen)
	case len(r.LossMask) != len(r.InputIDs):
		return fmt.Sprintf("loss_mask has %d entries, input_ids %d", len(r.LossMask), len(r.InputIDs))
	case int64(len(r.InputIDs)) != int64(r.PromptLen)+int64(r.CompletionLen):
		return fmt.Sprintf("input_ids has %d entries, prompt_len+completion_len = %d", len(r.InputIDs), int64(r.PromptLen)+int64(r.CompletionLen))
	}
	for i, v := range r.LossMask {
		want := uint8(0)
		if i >= int(r.PromptLen) {
			want = 1
		}
		if merged && want == 0 && v == 1 {
			continue
		}
		if v != want {
			return fmt.Sprintf("loss_mask[%d] = %d, want %d (prompt_len %d)", i, v, want, r.PromptLen)
		}
	}
	return ""
}

func report(w io.Writer, sum *Summary) {
	if w == nil {
		return
	}
	for _, r := range sum.Runs {
		fmt.Fprintf(w, "run %s\n  model %s  tokenizer %s  fingerprint %.12s\n", r.Dir, r.Run.Model, r.Run.TokenizerHash, r.Run.Fingerprint)
		fmt.Fprintf(w, "  %d shards, %d rows, %d tokens (%d prompt, %d completion), %d bytes", r.Totals.Shards, r.Totals.Rows,
			r.Totals.Tokens, r.Totals.PromptTokens, r.Totals.CompletionTokens, r.Totals.Bytes)
		if r.Totals.Tokens > 0 {
			fmt.Fprintf(w, " (%.2f bytes/token)", float64(r.Totals.Bytes)/float64(r.Totals.Tokens))
		}
		fmt.Fprintln(w)
		var fr []string
		for _, k := range sortedKeys(r.FinishReasons) {
			fr = append(fr, fmt.Sprintf("%s=%d", k, r.FinishReasons[k]))
		}
		if len(fr) > 0 {
			fmt.Fprintf(w, "  finish reasons: %s\n", strings.Join(fr, " "))
		}
		for _, m := range r.Missing {
			fmt.Fprintf(w, "  without features: row %s turn %d (%d tokens): %s\n", m.ID, m.Turn, m.Tokens, m.Reason)
		}
	}
	fmt.Fprintf(w, "total: %d runs, %d shards, %d rows, %d tokens (%d prompt, %d completion), %d bytes\n",
		len(sum.Runs), sum.Shards, sum.Rows, sum.Tokens, sum.PromptTokens, sum.CompletionTokens, sum.Bytes)
	if sum.FeatureFiles > 0 {
		fmt.Fprintf(w, "features: %d files, %d rows with features (%d tokens), %d rows without features (listed in their files and dead-lettered)\n",
			sum.FeatureFiles, sum.FeatureRows, sum.FeatureTokens, sum.FeatureRowsMissing)
	}
	if sum.Journaled > 0 {
		fmt.Fprintf(w, "journal: %d records not yet in shards (the sink did not stop cleanly; its next start writes them)\n", sum.Journaled)
	}
	if len(sum.Histogram) > 0 {
		fmt.Fprintln(w, "sequence length histogram (tokens per row):")
		var most int64
		for _, b := range sum.Histogram {
			most = max(most, b.Rows)
		}
		for _, b := range sum.Histogram {
			bar := int(40 * b.Rows / most)
			fmt.Fprintf(w, "  [%7d, %7d) %8d %s\n", b.Min, b.Max, b.Rows, strings.Repeat("#", max(bar, 1)))
		}
	}
	if len(sum.Problems) > 0 {
		fmt.Fprintf(w, "%d problem(s):\n", len(sum.Problems))
		for _, p := range sum.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
	} else {
		fmt.Fprintln(w, "ok: every shard matches its manifest and the schema")
	}
}
