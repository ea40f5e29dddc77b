package offline

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/draftflow/draftflow/internal/durable"
	"github.com/draftflow/draftflow/internal/idset"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/features"
	"github.com/draftflow/draftflow/sink/journal"
	"github.com/draftflow/draftflow/topics"
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
	// Origins counts rows by origin (topics.Origins): generated, or brought in with their output.
	Origins map[string]int64
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
	// Journaled counts the records in the sink's journal (package sink/journal) past its shards: rows of a sink that did
	// not stop cleanly, written into shards when it next starts.
	Journaled int64
}

// RunSummary describes one run directory.
type RunSummary struct {
	// Dir is the run directory.
	Dir string
	// Run is the run identity from its manifest.
	Run shard.RunInfo
	// Totals as read from the shards.
	Totals shard.Totals
	// FinishReasons counts rows by finish_reason.
	FinishReasons map[string]int64
	// Origins counts rows by origin (shards written before the origin column count as generated).
	Origins map[string]int64
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
// published, every row is valid (shard.Row.Validate; in a merged run the prompt part of the loss mask may hold
// ones), (id, turn) is unique per run, the run's generated-token counts (shard.TokenCountsFile) are those of
// its rows, and a captured run's feature files match its shards. It counts what the sink's journal holds past
// the shards, writes a report to w (nil: none) and returns an error when anything is wrong. It stops with
// ctx's error once ctx ends.
func Inspect(ctx context.Context, dir string, w io.Writer) (Summary, error) {
	sum := Summary{Origins: map[string]int64{}}
	runs, err := shard.RunDirs(dir)
	if err != nil {
		return sum, fmt.Errorf("inspect: %w", err)
	}
	if len(runs) == 0 {
		return sum, fmt.Errorf("inspect: no run (no %s) under %s", shard.ManifestName, dir)
	}
	hist := map[int]int64{}
	for _, rd := range runs {
		rs := inspectRun(ctx, rd, &sum, hist)
		if err := ctx.Err(); err != nil {
			return sum, fmt.Errorf("inspect: %w", err)
		}
		sum.Runs = append(sum.Runs, rs)
	}
	for _, k := range slices.Sorted(maps.Keys(hist)) {
		lo := int64(0)
		if k > 0 {
			lo = 1 << (k - 1)
		}
		sum.Histogram = append(sum.Histogram, Bucket{Min: lo, Max: 1 << k, Rows: hist[k]})
	}
	sum.Journaled = journal.Pending(dir)
	report(w, &sum)
	if len(sum.Problems) > 0 {
		return sum, fmt.Errorf("inspect: %d problem(s), first: %s", len(sum.Problems), sum.Problems[0])
	}
	return sum, nil
}

// runCheck is the inspection of one run directory.
type runCheck struct {
	rd      string
	m       *shard.Manifest
	sum     *Summary
	rs      *RunSummary
	hist    map[int]int64
	seen    *idset.Set   // the (id, turn) keys seen so far, with the index of their shard
	recount shard.Counts // the generated tokens of the rows
	fx      *featureCheck
}

func (c *runCheck) problem(format string, args ...any) {
	c.sum.Problems = append(c.sum.Problems, c.rd+": "+fmt.Sprintf(format, args...))
}

// inspectRun checks one run directory, adding to sum and hist.
func inspectRun(ctx context.Context, rd string, sum *Summary, hist map[int]int64) RunSummary {
	rs := RunSummary{Dir: rd, FinishReasons: map[string]int64{}, Origins: map[string]int64{}}
	c := &runCheck{rd: rd, sum: sum, rs: &rs, hist: hist}
	m, err := shard.ReadManifest(rd)
	if err != nil {
		c.problem("%v", err)
		return rs
	}
	c.m = m
	rs.Run = m.Run
	listed, ents, ok := c.manifest()
	if !ok {
		return rs
	}
	// The (id, turn) keys seen so far, to find a row in two shards: in a temporary file, so inspecting a run
	// of millions of rows does not hold them all in memory.
	c.seen, err = idset.New("")
	if err != nil {
		c.problem("duplicate check: %v", err)
		return rs
	}
	defer c.seen.Close()
	c.fx = newFeatureCheck(rd, ents, listed, c.problem)
	rs.Features = c.fx.used
	for i, sh := range m.Shards {
		if ctx.Err() != nil {
			return rs
		}
		c.shard(ctx, i, sh)
	}
	if counts, err := shard.RunTokenCounts(ctx, rd); err != nil {
		c.problem("%s: %v", shard.TokenCountsFile, err)
	} else if !slices.Equal(counts, c.recount.Sorted()) {
		c.problem("%s does not match the generated tokens of the rows", shard.TokenCountsFile)
	}
	if want := m.Origins; want != nil && !maps.Equal(want, rs.Origins) {
		c.problem("manifest counts rows by origin as %v, the shards hold %v", want, rs.Origins)
	}
	for o, n := range rs.Origins {
		sum.Origins[o] += n
	}
	sum.Shards += rs.Totals.Shards
	sum.Rows += rs.Totals.Rows
	sum.Tokens += rs.Totals.Tokens
	sum.PromptTokens += rs.Totals.PromptTokens
	sum.CompletionTokens += rs.Totals.CompletionTokens
	sum.Bytes += rs.Totals.Bytes
	return rs
}

// manifest checks the manifest against itself and the run directory: no shard listed twice, totals that add
// up, no shard on disk it does not list. It returns the shards it lists and the directory's entries; ok is
// false when the directory cannot be read.
func (c *runCheck) manifest() (listed map[string]bool, ents []os.DirEntry, ok bool) {
	var want shard.Totals
	listed = map[string]bool{}
	for _, sh := range c.m.Shards {
		want.Add(sh)
		if listed[sh.File] {
			c.problem("manifest lists %s twice", sh.File)
		}
		listed[sh.File] = true
	}
	if want != c.m.Totals {
		c.problem("manifest totals %+v do not add up to its shards %+v", c.m.Totals, want)
	}
	ents, err := os.ReadDir(c.rd)
	if err != nil {
		c.problem("%v", err)
		return nil, nil, false
	}
	for _, e := range ents {
		if _, ok := shard.ParseName(e.Name()); ok && !listed[e.Name()] {
			c.problem("shard %s is not in the manifest", e.Name())
		}
	}
	return listed, ents, true
}

// shard checks the run's shard sh, the shardIdx-th of its manifest, and its feature file.
func (c *runCheck) shard(ctx context.Context, shardIdx int, sh shard.ManifestShard) {
	path := filepath.Join(c.rd, sh.File)
	digest, size, err := durable.FileSHA256(path)
	if err != nil {
		c.problem("%v", err)
		return
	}
	if size != sh.Bytes {
		c.problem("%s is %d bytes, manifest says %d", sh.File, size, sh.Bytes)
	}
	if digest != sh.SHA256 {
		c.problem("%s has sha256 %s, manifest says %s", sh.File, digest, sh.SHA256)
	}
	sf, err := shard.Open(path)
	if err != nil {
		c.problem("%v", err)
		return
	}
	var info shard.RunInfo
	if err := json.Unmarshal([]byte(sf.Meta(shard.MetaRun)), &info); err != nil || info.Fingerprint != c.m.Run.Fingerprint {
		c.problem("%s belongs to run %q, manifest is run %q", sh.File, info.Fingerprint, c.m.Run.Fingerprint)
	}
	var refs []features.RowRef
	st := shard.Totals{Shards: 1, Bytes: size}
	origins := map[string]int64{}
	err = sf.Scan(ctx, nil, func(r *shard.Row) error {
		if c.fx.used {
			refs = append(refs, features.RowRef{ID: r.ID, Turn: int(r.Turn), Tokens: len(r.InputIDs)})
		}
		st.Rows++
		st.Tokens += int64(len(r.InputIDs))
		st.PromptTokens += int64(r.PromptLen)
		st.CompletionTokens += int64(r.CompletionLen)
		origins[r.Origin]++
		return c.row(shardIdx, sh.File, r)
	})
	sf.Close()
	if err != nil {
		c.problem("%s: %v", sh.File, err)
		return
	}
	c.fx.shard(sh.File, refs, c.sum, c.rs)
	if st.Rows != sh.Rows || st.Tokens != sh.Tokens || st.PromptTokens != sh.PromptTokens || st.CompletionTokens != sh.CompletionTokens {
		c.problem("%s holds %d rows / %d tokens, manifest says %d / %d", sh.File, st.Rows, st.Tokens, sh.Rows, sh.Tokens)
	}
	if !maps.Equal(origins, sh.OriginCounts()) {
		c.problem("%s holds rows by origin %v, manifest says %v", sh.File, origins, sh.OriginCounts())
	}
	for o, n := range origins {
		c.rs.Origins[o] += n
	}
	c.rs.Totals.Shards += st.Shards
	c.rs.Totals.Rows += st.Rows
	c.rs.Totals.Tokens += st.Tokens
	c.rs.Totals.PromptTokens += st.PromptTokens
	c.rs.Totals.CompletionTokens += st.CompletionTokens
	c.rs.Totals.Bytes += st.Bytes
}

// row checks one row of the shardIdx-th shard (file) and counts it.
func (c *runCheck) row(shardIdx int, file string, r *shard.Row) error {
	if err := r.Validate(c.m.Merged); err != nil && len(c.sum.Problems) < 1000 {
		c.problem("%s: row %q: %v", file, r.ID, err)
	}
	k := r.ID + "\x00" + strconv.Itoa(int(r.Turn))
	prev, dup, err := c.seen.Get(k)
	switch {
	case err != nil:
		return fmt.Errorf("duplicate check: %w", err)
	case dup:
		i, _ := binary.Uvarint(prev)
		c.problem("%s: id %q turn %d is also in %s", file, r.ID, r.Turn, c.m.Shards[min(int(i), len(c.m.Shards)-1)].File)
	default:
		if err := c.seen.Put(k, binary.AppendUvarint(nil, uint64(shardIdx))); err != nil {
			return fmt.Errorf("duplicate check: %w", err)
		}
	}
	if r.PromptLen >= 0 && int(r.PromptLen) <= len(r.InputIDs) {
		for _, id := range r.InputIDs[r.PromptLen:] {
			c.recount.Add(id, 1)
		}
	}
	c.rs.FinishReasons[r.FinishReason]++
	c.hist[bits.Len64(uint64(len(r.InputIDs)))]++
	return nil
}

// originList lists counts by origin in the order of topics.Origins, then any other (an unknown origin is a
// problem of its rows already): "generated=10 result=2".
func originList(counts map[string]int64) string {
	var out []string
	for _, o := range topics.Origins() {
		if n := counts[o]; n > 0 {
			out = append(out, fmt.Sprintf("%s=%d", o, n))
		}
	}
	for _, o := range slices.Sorted(maps.Keys(counts)) {
		if !slices.Contains(topics.Origins(), o) {
			out = append(out, fmt.Sprintf("%q=%d", o, counts[o]))
		}
	}
	return strings.Join(out, " ")
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
		for _, k := range slices.Sorted(maps.Keys(r.FinishReasons)) {
			fr = append(fr, fmt.Sprintf("%s=%d", k, r.FinishReasons[k]))
		}
		if len(fr) > 0 {
			fmt.Fprintf(w, "  finish reasons: %s\n", strings.Join(fr, " "))
		}
		if o := originList(r.Origins); o != "" {
			fmt.Fprintf(w, "  origins: %s\n", o)
		}
		for _, m := range r.Missing {
			fmt.Fprintf(w, "  without features: row %s turn %d (%d tokens): %s\n", m.ID, m.Turn, m.Tokens, m.Reason)
		}
	}
	fmt.Fprintf(w, "total: %d runs, %d shards, %d rows, %d tokens (%d prompt, %d completion), %d bytes\n",
		len(sum.Runs), sum.Shards, sum.Rows, sum.Tokens, sum.PromptTokens, sum.CompletionTokens, sum.Bytes)
	if o := originList(sum.Origins); o != "" {
		fmt.Fprintf(w, "rows by origin: %s\n", o)
	}
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
