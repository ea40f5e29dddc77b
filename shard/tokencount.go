package shard

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// TokenCountsFile is the file, in each run directory, that holds how often each generated token id (loss mask
// 1) occurs in the run's committed shards. The sink rewrites it (WriteCounts: temporary file and rename) after
// the manifest at every flush, naming the manifest shards it covers; a crash between the two leaves it
// covering a prefix of the manifest, and the shards past it are counted from their rows (LoadCounts: by the
// sink on start, which then rewrites the file, and by RunTokenCounts). Its total is therefore always the
// manifest's completion-token total.
const TokenCountsFile = "token_counts.bin"

// TokenCount is how often one token id occurs.
type TokenCount struct {
	ID    int32
	Count int64
}

// runCounts is TokenCountsFile.
type runCounts struct {
	FormatVersion int `json:"format_version"`
	// Shards is how many manifest shards, from the first, the counts cover; LastShard names the last of them.
	Shards    int    `json:"shards"`
	LastShard string `json:"last_shard"`
	// CompletionTokens is the sum of the counts.
	CompletionTokens int64 `json:"completion_tokens"`
	// Dense and Sparse are how many dense counts and sparse (id, count) pairs follow the header line.
	Dense  int `json:"dense"`
	Sparse int `json:"sparse"`
}

// denseCountLimit bounds the ids counted in a dense array; larger ids (possible: ids up to math.MaxInt32 are
// valid) are counted in a map instead, so a stray id cannot make the sink allocate gigabytes.
const denseCountLimit = 1 << 22

// Counts counts token ids: a dense array for the usual vocabulary sizes, a map past denseCountLimit. The zero
// value is empty and ready to use.
type Counts struct {
	dense  []int64
	sparse map[int32]int64
}

func (c *Counts) grow(maxID int32) {
	if maxID >= denseCountLimit || int(maxID) < len(c.dense) {
		return
	}
	n := max(int(maxID)+1, 2*len(c.dense))
	d := make([]int64, min(n, denseCountLimit))
	copy(d, c.dense)
	c.dense = d
}

// Add counts id n more times.
func (c *Counts) Add(id int32, n int64) {
	if id >= 0 && int(id) < len(c.dense) {
		c.dense[id] += n
		return
	}
	if id >= 0 && id < denseCountLimit {
		c.grow(id)
		c.dense[id] += n
		return
	}
	if c.sparse == nil {
		c.sparse = map[int32]int64{}
	}
	c.sparse[id] += n
}

// AddOutputs counts the output ids of rows: the generated tokens a shard of them holds.
func (c *Counts) AddOutputs(rows []*WriteRow) {
	var maxID uint32
	for _, r := range rows {
		for _, id := range r.Output {
			maxID = max(maxID, id)
		}
	}
	c.grow(int32(min(maxID, denseCountLimit)))
	d := c.dense
	for _, r := range rows {
		for _, id := range r.Output {
			if int(id) < len(d) {
				d[id]++
			} else {
				c.Add(int32(id), 1)
			}
		}
	}
}

// AddCounts adds o's counts.
func (c *Counts) AddCounts(o *Counts) {
	c.grow(int32(len(o.dense) - 1))
	for id, n := range o.dense {
		c.dense[id] += n
	}
	for id, n := range o.sparse {
		c.Add(id, n)
	}
}

// Sorted returns the non-zero counts, ids ascending.
func (c *Counts) Sorted() []TokenCount {
	var out []TokenCount
	for id, n := range c.dense {
		if n != 0 {
			out = append(out, TokenCount{int32(id), n})
		}
	}
	if len(c.sparse) > 0 {
		var extra []TokenCount
		for id, n := range c.sparse {
			if n != 0 {
				extra = append(extra, TokenCount{id, n})
			}
		}
		slices.SortFunc(extra, func(a, b TokenCount) int { return int(a.ID) - int(b.ID) })
		out = append(out, extra...) // sparse ids are all past the dense ones
	}
	return out
}

// countShardRows adds the generated tokens of a shard's rows to acc.
func countShardRows(ctx context.Context, path string, acc *Counts) error {
	return ScanFile(ctx, path, []Col{ColInputIDs, ColPromptLen}, func(r *Row) error {
		if r.PromptLen < 0 || int(r.PromptLen) > len(r.InputIDs) {
			return fmt.Errorf("%s: prompt_len %d of %d tokens", path, r.PromptLen, len(r.InputIDs))
		}
		for _, id := range r.InputIDs[r.PromptLen:] {
			acc.Add(id, 1)
		}
		return nil
	})
}

// WriteCounts writes a run's counts (TokenCountsFile), covering every shard of m: runCounts as one JSON line (without
// Counts), then the dense counts as little-endian int64 (count of id 0, 1, ...: runCounts.Dense of them) and the
// sparse ones as little-endian int64 (id, count) pairs (runCounts.Sparse of them). It runs at every flush, over
// up to the whole vocabulary, so it is a copy rather than an encoding, and it is not fsynced: a version lost or
// torn by a crash fails the reader's length and sum checks, and the shards are then counted from their rows
// (BenchmarkTokenCounting).
func WriteCounts(runDir string, m *Manifest, acc *Counts) error {
	rc := runCounts{FormatVersion: FormatVersion, Shards: len(m.Shards), Dense: len(acc.dense), Sparse: len(acc.sparse)}
	if len(m.Shards) > 0 {
		rc.LastShard = m.Shards[len(m.Shards)-1].File
	}
	for _, n := range acc.dense {
		rc.CompletionTokens += n
	}
	for _, n := range acc.sparse {
		rc.CompletionTokens += n
	}
	head, err := json.Marshal(&rc)
	if err != nil {
		return err
	}
	b := make([]byte, 0, len(head)+1+8*len(acc.dense)+16*len(acc.sparse))
	b = append(append(b, head...), '\n')
	for _, n := range acc.dense {
		b = binary.LittleEndian.AppendUint64(b, uint64(n))
	}
	for id, n := range acc.sparse {
		b = binary.LittleEndian.AppendUint64(b, uint64(id))
		b = binary.LittleEndian.AppendUint64(b, uint64(n))
	}
	return replaceFile(filepath.Join(runDir, TokenCountsFile), b)
}

// readRunCounts parses what WriteCounts wrote.
func readRunCounts(b []byte) (runCounts, *Counts, error) {
	var rc runCounts
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return rc, nil, errors.New("no header line")
	}
	if err := json.Unmarshal(b[:nl], &rc); err != nil {
		return rc, nil, err
	}
	if rc.FormatVersion != FormatVersion {
		return rc, nil, fmt.Errorf("format version %d, this build reads %d", rc.FormatVersion, FormatVersion)
	}
	body := b[nl+1:]
	if rc.Dense < 0 || rc.Dense > denseCountLimit || rc.Sparse < 0 || len(body) != 8*rc.Dense+16*rc.Sparse {
		return rc, nil, fmt.Errorf("%d bytes of counts for %d dense and %d sparse entries", len(body), rc.Dense, rc.Sparse)
	}
	acc := &Counts{dense: make([]int64, rc.Dense)}
	var sum int64
	for i := range acc.dense {
		acc.dense[i] = int64(binary.LittleEndian.Uint64(body[8*i:]))
		sum += acc.dense[i]
	}
	for i, p := 0, body[8*rc.Dense:]; i < rc.Sparse; i++ {
		id, n := int64(binary.LittleEndian.Uint64(p[16*i:])), int64(binary.LittleEndian.Uint64(p[16*i+8:]))
		if id < denseCountLimit || id > math.MaxInt32 {
			return rc, nil, fmt.Errorf("sparse id %d", id)
		}
		acc.Add(int32(id), n)
		sum += n
	}
	if sum != rc.CompletionTokens {
		return rc, nil, fmt.Errorf("counts add up to %d, header says %d", sum, rc.CompletionTokens)
	}
	return rc, acc, nil
}

// LoadCounts returns the counts of every shard m lists: TokenCountsFile where it covers them, the rows of
// the shards past it otherwise (all of them when the file is missing or names shards m no longer lists).
// stale reports whether the file did not cover m exactly.
func LoadCounts(ctx context.Context, runDir string, m *Manifest) (acc *Counts, stale bool, err error) {
	acc = &Counts{}
	from := 0
	b, err := os.ReadFile(filepath.Join(runDir, TokenCountsFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		stale = len(m.Shards) > 0
	case err != nil:
		return nil, false, err
	default:
		rc, counts, err := readRunCounts(b)
		if err != nil {
			// Written atomically, so this is outside damage: count every shard again.
			counts, rc = &Counts{}, runCounts{Shards: -1}
		}
		if rc.Shards >= 0 && rc.Shards <= len(m.Shards) && (rc.Shards == 0 || m.Shards[rc.Shards-1].File == rc.LastShard) {
			acc, from = counts, rc.Shards
		}
		stale = from != len(m.Shards)
	}
	for _, sh := range m.Shards[from:] {
		if err := countShardRows(ctx, filepath.Join(runDir, sh.File), acc); err != nil {
			return nil, false, err
		}
	}
	return acc, stale, nil
}

// RunTokenCounts returns the generated-token counts (loss mask 1) of a run directory's committed shards, ids
// ascending, and checks that they add up to the manifest's completion-token total.
func RunTokenCounts(ctx context.Context, runDir string) ([]TokenCount, error) {
	m, err := ReadManifest(runDir)
	if err != nil {
		return nil, err
	}
	acc, _, err := LoadCounts(ctx, runDir, m)
	if err != nil {
		return nil, err
	}
	counts := acc.Sorted()
	var sum int64
	for _, tc := range counts {
		sum += tc.Count
	}
	if sum != m.Totals.CompletionTokens {
		return nil, fmt.Errorf("%s: token counts add up to %d, the manifest says %d completion tokens", runDir, sum, m.Totals.CompletionTokens)
	}
	return counts, nil
}
