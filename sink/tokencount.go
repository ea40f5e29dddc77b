package sink

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// MetaTokenCounts is the shard key-value metadata key holding how often each generated token id (loss mask 1)
// occurs in the shard: "id:count" pairs, ids ascending, joined by commas. Kept in the shard's own footer, the
// counts are committed, rolled forward, recovered and deduplicated exactly like the rows they count, and their
// sum is the shard's completion_tokens.
const MetaTokenCounts = "draftflow.token_counts"

// TokenCount is how often one token id occurs.
type TokenCount struct {
	ID    int32
	Count int64
}

// denseCountLimit bounds the id range counted in a dense array; rows with larger ids (possible: ids up to
// math.MaxInt32 are valid) are counted in a map instead, so a stray id cannot make a flush allocate gigabytes.
const denseCountLimit = 1 << 22

// tokenCounter counts token ids: a dense array for the usual vocabulary sizes, a map past denseCountLimit.
type tokenCounter struct {
	dense  []int64
	sparse map[int32]int64
}

func newTokenCounter(maxID uint32) *tokenCounter {
	if maxID < denseCountLimit {
		return &tokenCounter{dense: make([]int64, int(maxID)+1)}
	}
	return &tokenCounter{sparse: map[int32]int64{}}
}

func (c *tokenCounter) addUint32(ids []uint32) {
	if c.dense != nil {
		d := c.dense
		for _, id := range ids {
			d[id]++
		}
		return
	}
	for _, id := range ids {
		c.sparse[int32(id)]++
	}
}

func (c *tokenCounter) addInt32(id int32) {
	if c.dense != nil && id >= 0 && int(id) < len(c.dense) {
		c.dense[id]++
		return
	}
	if c.sparse == nil {
		c.sparse = map[int32]int64{}
	}
	c.sparse[id]++
}

// counts returns the non-zero counts, ids ascending.
func (c *tokenCounter) counts() []TokenCount {
	var out []TokenCount
	for id, n := range c.dense {
		if n != 0 {
			out = append(out, TokenCount{int32(id), n})
		}
	}
	if len(c.sparse) > 0 {
		for id, n := range c.sparse {
			out = append(out, TokenCount{id, n})
		}
		slices.SortFunc(out, func(a, b TokenCount) int { return int(a.ID) - int(b.ID) })
		// Dense and sparse may hold the same id (addInt32 past the dense range never does; kept for safety).
		merged := out[:0]
		for _, tc := range out {
			if n := len(merged); n > 0 && merged[n-1].ID == tc.ID {
				merged[n-1].Count += tc.Count
				continue
			}
			merged = append(merged, tc)
		}
		out = merged
	}
	return out
}

// outputTokenCounts counts the output ids of rows.
func outputTokenCounts(rows []*row) []TokenCount {
	var maxID uint32
	for _, r := range rows {
		for _, id := range r.output {
			maxID = max(maxID, id)
		}
	}
	c := newTokenCounter(maxID)
	for _, r := range rows {
		c.addUint32(r.output)
	}
	return c.counts()
}

// formatTokenCounts encodes counts as MetaTokenCounts holds them.
func formatTokenCounts(counts []TokenCount) string {
	b := make([]byte, 0, 12*len(counts))
	for i, tc := range counts {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(tc.ID), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, tc.Count, 10)
	}
	return string(b)
}

// parseTokenCounts decodes MetaTokenCounts; ids must be strictly ascending and counts positive.
func parseTokenCounts(s string) ([]TokenCount, error) {
	if s == "" {
		return nil, nil
	}
	out := make([]TokenCount, 0, strings.Count(s, ",")+1)
	for _, p := range strings.Split(s, ",") {
		id, n, ok := strings.Cut(p, ":")
		if !ok {
			return nil, fmt.Errorf("bad token count %q", p)
		}
		i, err1 := strconv.ParseInt(id, 10, 32)
		c, err2 := strconv.ParseInt(n, 10, 64)
		if err1 != nil || err2 != nil || i < 0 || c <= 0 {
			return nil, fmt.Errorf("bad token count %q", p)
		}
		if k := len(out); k > 0 && out[k-1].ID >= int32(i) {
			return nil, fmt.Errorf("token ids not ascending at %q", p)
		}
		out = append(out, TokenCount{int32(i), c})
	}
	return out, nil
}

// addCounts adds b into acc.
func addCounts(acc map[int32]int64, b []TokenCount) {
	for _, tc := range b {
		acc[tc.ID] += tc.Count
	}
}

// sortedCounts turns an accumulator into ascending counts without zeros.
func sortedCounts(acc map[int32]int64) []TokenCount {
	out := make([]TokenCount, 0, len(acc))
	for id, n := range acc {
		if n != 0 {
			out = append(out, TokenCount{id, n})
		}
	}
	slices.SortFunc(out, func(a, b TokenCount) int { return int(a.ID) - int(b.ID) })
	return out
}

// shardTokenCounts returns a shard's generated-token counts: from its footer, or, for a shard written before
// the sink kept them, by counting its rows.
func shardTokenCounts(sf *shardFile) ([]TokenCount, error) {
	if v := sf.pf.MetaData().KeyValueMetadata().FindValue(MetaTokenCounts); v != nil {
		return parseTokenCounts(*v)
	}
	acc := &tokenCounter{sparse: map[int32]int64{}}
	err := sf.scan(context.Background(), []int{colInputIDs, colPromptLen}, func(r *ShardRow) error {
		for _, id := range r.InputIDs[r.PromptLen:] {
			acc.addInt32(id)
		}
		return nil
	})
	return acc.counts(), err
}

// RunTokenCounts returns the generated-token counts (loss mask 1) of a run directory, summed over the shards
// its manifest lists, ids ascending, and checks that they add up to the manifest's completion-token total.
func RunTokenCounts(runDir string) ([]TokenCount, error) {
	m, err := ReadManifest(runDir)
	if err != nil {
		return nil, err
	}
	acc := map[int32]int64{}
	for _, sh := range m.Shards {
		sf, err := openShard(filepath.Join(runDir, sh.File))
		if err != nil {
			return nil, err
		}
		c, err := shardTokenCounts(sf)
		sf.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", runDir, sh.File, err)
		}
		var sum int64
		for _, tc := range c {
			sum += tc.Count
		}
		if sum != sh.CompletionTokens {
			return nil, fmt.Errorf("%s: %s: token counts add up to %d, manifest says %d completion tokens", runDir, sh.File, sum, sh.CompletionTokens)
		}
		addCounts(acc, c)
	}
	return sortedCounts(acc), nil
}
