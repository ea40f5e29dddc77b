package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// TokenCountsFile is the file, in each run directory, that holds how often each generated token id (loss mask
// 1) occurs in the run's committed shards. The sink rewrites it atomically after the manifest at every flush,
// naming the manifest shards it covers; a crash between the two leaves it covering a prefix of the manifest,
// and the shards past it are counted from their rows (by the sink on start, which then rewrites the file, and
// by RunTokenCounts). Its total is therefore always the manifest's completion-token total.
const TokenCountsFile = "token_counts.json"

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
	// CompletionTokens is the sum of Counts.
	CompletionTokens int64 `json:"completion_tokens"`
	// Counts holds [token id, count] pairs, ids ascending.
	Counts [][2]int64 `json:"counts"`
}

// denseCountLimit bounds the id range counted in a dense array; rows with larger ids (possible: ids up to
// math.MaxInt32 are valid) are counted in a map instead, so a stray id cannot make a flush allocate gigabytes.
const denseCountLimit = 1 << 22

// outputTokenCounts counts the output ids of rows into acc.
func outputTokenCounts(rows []*row, acc map[int32]int64) {
	var maxID uint32
	for _, r := range rows {
		for _, id := range r.output {
			maxID = max(maxID, id)
		}
	}
	if maxID >= denseCountLimit {
		for _, r := range rows {
			for _, id := range r.output {
				acc[int32(id)]++
			}
		}
		return
	}
	dense := make([]int64, int(maxID)+1)
	for _, r := range rows {
		for _, id := range r.output {
			dense[id]++
		}
	}
	for id, n := range dense {
		if n != 0 {
			acc[int32(id)] += n
		}
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

// countShardRows adds the generated tokens of a shard's rows to acc.
func countShardRows(path string, acc map[int32]int64) error {
	sf, err := openShard(path)
	if err != nil {
		return err
	}
	defer sf.Close()
	return sf.scan(context.Background(), []int{colInputIDs, colPromptLen}, func(r *ShardRow) error {
		if r.PromptLen < 0 || int(r.PromptLen) > len(r.InputIDs) {
			return fmt.Errorf("%s: prompt_len %d of %d tokens", path, r.PromptLen, len(r.InputIDs))
		}
		for _, id := range r.InputIDs[r.PromptLen:] {
			acc[id]++
		}
		return nil
	})
}

// writeRunCounts writes a run's counts, covering every shard of m.
func writeRunCounts(runDir string, m *Manifest, acc map[int32]int64) error {
	rc := runCounts{FormatVersion: FormatVersion, Shards: len(m.Shards)}
	if len(m.Shards) > 0 {
		rc.LastShard = m.Shards[len(m.Shards)-1].File
	}
	for _, tc := range sortedCounts(acc) {
		rc.Counts = append(rc.Counts, [2]int64{int64(tc.ID), tc.Count})
		rc.CompletionTokens += tc.Count
	}
	b, err := json.Marshal(&rc)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(runDir, TokenCountsFile), append(b, '\n'))
}

// loadRunCounts returns the counts of every shard m lists: TokenCountsFile where it covers them, the rows of
// the shards past it otherwise (all of them when the file is missing or names shards m no longer lists).
// stale reports whether the file did not cover m exactly.
func loadRunCounts(runDir string, m *Manifest) (acc map[int32]int64, stale bool, err error) {
	acc = map[int32]int64{}
	from := 0
	b, err := os.ReadFile(filepath.Join(runDir, TokenCountsFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		stale = len(m.Shards) > 0
	case err != nil:
		return nil, false, err
	default:
		var rc runCounts
		if err := json.Unmarshal(b, &rc); err != nil || rc.FormatVersion != FormatVersion {
			return nil, false, fmt.Errorf("%s: unreadable (%v) or format version %d", filepath.Join(runDir, TokenCountsFile), err, rc.FormatVersion)
		}
		if rc.Shards <= len(m.Shards) && (rc.Shards == 0 || m.Shards[rc.Shards-1].File == rc.LastShard) {
			for _, p := range rc.Counts {
				acc[int32(p[0])] += p[1]
			}
			from = rc.Shards
		}
		stale = from != len(m.Shards)
	}
	for _, sh := range m.Shards[from:] {
		if err := countShardRows(filepath.Join(runDir, sh.File), acc); err != nil {
			return nil, false, err
		}
	}
	return acc, stale, nil
}

// RunTokenCounts returns the generated-token counts (loss mask 1) of a run directory's committed shards, ids
// ascending, and checks that they add up to the manifest's completion-token total.
func RunTokenCounts(runDir string) ([]TokenCount, error) {
	m, err := ReadManifest(runDir)
	if err != nil {
		return nil, err
	}
	acc, _, err := loadRunCounts(runDir, m)
	if err != nil {
		return nil, err
	}
	counts := sortedCounts(acc)
	var sum int64
	for _, tc := range counts {
		sum += tc.Count
	}
	if sum != m.Totals.CompletionTokens {
		return nil, fmt.Errorf("%s: token counts add up to %d, the manifest says %d completion tokens", runDir, sum, m.Totals.CompletionTokens)
	}
	return counts, nil
}
