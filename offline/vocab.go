package offline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/draftflow/draftflow/shard"
)

// Files Vocab writes.
const (
	// D2TName holds, per draft id d, target id minus d (int64, shape [draft vocab size]).
	D2TName = "d2t.npy"
	// T2DName marks the target ids in the draft vocabulary (bool, shape [target vocab size]).
	T2DName = "t2d.npy"
	// TokenCountsName lists the generated-token counts: a "token_id<TAB>count" header, then one line per id
	// that occurs, ids ascending.
	TokenCountsName = "token_counts.tsv"
	// VocabInfoName describes the selection (VocabInfo as JSON).
	VocabInfoName = "vocab.json"
)

// VocabOptions says what Vocab selects.
type VocabOptions struct {
	// Runs names the runs to count (see shard.SelectRuns); empty: the only run under the directory.
	Runs []string
	// DraftVocabSize is how many target ids the draft vocabulary keeps (required).
	DraftVocabSize int
	// TargetVocabSize is the target model's vocabulary size, the length of t2d (required: see
	// TargetVocabSize for reading it from a model directory).
	TargetVocabSize int
	// Limits, when they change any row, make Vocab count the tokens of the rows as Export writes them
	// (truncated, without dropped rows) instead of the sink's counts.
	Limits Limits
}

// VocabInfo describes a draft vocabulary Vocab selected.
type VocabInfo struct {
	// Runs are the run directories counted and Model, TokenizerHash their (common) model and tokenizer.
	Runs          []string `json:"runs"`
	Model         string   `json:"model"`
	TokenizerHash string   `json:"tokenizer_hash"`
	// DraftVocabSize and TargetVocabSize are the lengths of d2t and t2d.
	DraftVocabSize  int `json:"draft_vocab_size"`
	TargetVocabSize int `json:"target_vocab_size"`
	// Source is "sink" (the counts the sink kept with the shards, shard.TokenCountsFile) or "rows" (counted
	// from the rows after the limits).
	Source string `json:"source"`
	// Limits applied and what they did (Source "rows" only).
	Limits *Limits      `json:"limits,omitempty"`
	Report *LimitReport `json:"report,omitempty"`
	// GeneratedTokens counted, DistinctTokens among them, and SelectedTokens of them whose ids the draft
	// vocabulary keeps (SelectedTokens / GeneratedTokens is the coverage the trainers print).
	GeneratedTokens int64 `json:"generated_tokens"`
	DistinctTokens  int   `json:"distinct_tokens"`
	SelectedTokens  int64 `json:"selected_tokens"`
	// TieBreak says how equal counts at the cut-off were ordered.
	TieBreak string `json:"tie_break"`
}

// Vocabulary is a draft vocabulary: the counts, the selected ids and both maps.
type Vocabulary struct {
	Info   VocabInfo
	Counts []shard.TokenCount // ids ascending
	// Selected are the DraftVocabSize target ids kept, ascending; D2T[d] = Selected[d] - d; T2D[t] is true
	// for t in Selected.
	Selected []int32
	D2T      []int64
	T2D      []bool
}

// Vocab counts the generated tokens of the selected runs under dir and selects the draft vocabulary: the
// DraftVocabSize most frequent ids, equal counts ordered by lower id first (speculators'
// build_vocab_mappings_from_distribution; SpecForge's process_token_dict_to_mappings keeps the first seen,
// which depends on row order), padded with the lowest unused ids when fewer ids occur. It stops with ctx's
// error once ctx ends.
func Vocab(ctx context.Context, dir string, opts VocabOptions) (*Vocabulary, error) {
	if opts.DraftVocabSize <= 0 {
		return nil, errors.New("vocab: the draft vocabulary size must be positive")
	}
	if opts.TargetVocabSize < opts.DraftVocabSize {
		return nil, fmt.Errorf("vocab: target vocabulary size %d is smaller than the draft vocabulary size %d", opts.TargetVocabSize, opts.DraftVocabSize)
	}
	if err := opts.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("vocab: %w", err)
	}
	runs, err := shard.SelectRuns(dir, opts.Runs)
	if err != nil {
		return nil, fmt.Errorf("vocab: %w", err)
	}
	v := &Vocabulary{Info: VocabInfo{Runs: runs, DraftVocabSize: opts.DraftVocabSize, TargetVocabSize: opts.TargetVocabSize,
		TieBreak: "equal counts: lower token id first"}}
	acc := &shard.Counts{}
	if opts.Limits.none() {
		v.Info.Source = "sink"
		for _, rd := range runs {
			c, err := shard.RunTokenCounts(ctx, rd)
			if err != nil {
				return nil, fmt.Errorf("vocab: %w", err)
			}
			for _, tc := range c {
				acc.Add(tc.ID, tc.Count)
			}
		}
	} else {
		v.Info.Source = "rows"
		l := opts.Limits
		v.Info.Limits = &l
		v.Info.Report = &LimitReport{}
		for _, rd := range runs {
			if err := countRows(ctx, rd, opts.Limits, acc, v.Info.Report); err != nil {
				return nil, fmt.Errorf("vocab: %w", err)
			}
		}
	}
	m, err := shard.ReadManifest(runs[0])
	if err != nil {
		return nil, err
	}
	v.Info.Model, v.Info.TokenizerHash = m.Run.Model, m.Run.TokenizerHash
	v.Counts = acc.Sorted()
	for _, tc := range v.Counts {
		if int(tc.ID) >= opts.TargetVocabSize {
			return nil, fmt.Errorf("vocab: token id %d occurs in the rows but the target vocabulary has %d ids: wrong model or --target-vocab-size", tc.ID, opts.TargetVocabSize)
		}
		v.Info.GeneratedTokens += tc.Count
	}
	v.Info.DistinctTokens = len(v.Counts)
	v.choose()
	return v, nil
}

// choose fills Selected, D2T, T2D and SelectedTokens from Counts.
func (v *Vocabulary) choose() {
	n := v.Info.DraftVocabSize
	byFreq := slices.Clone(v.Counts)
	slices.SortStableFunc(byFreq, func(a, b shard.TokenCount) int { // Counts are ids ascending: stable keeps lower ids first
		switch {
		case a.Count > b.Count:
			return -1
		case a.Count < b.Count:
			return 1
		}
		return 0
	})
	sel := make([]int32, 0, n)
	in := map[int32]bool{}
	for _, tc := range byFreq[:min(n, len(byFreq))] {
		sel = append(sel, tc.ID)
		in[tc.ID] = true
		v.Info.SelectedTokens += tc.Count
	}
	for id := int32(0); len(sel) < n; id++ {
		if !in[id] {
			sel = append(sel, id)
		}
	}
	slices.Sort(sel)
	v.Selected = sel
	v.D2T = make([]int64, n)
	v.T2D = make([]bool, v.Info.TargetVocabSize)
	for d, t := range sel {
		v.D2T[d] = int64(t) - int64(d)
		v.T2D[t] = true
	}
}

// countRows adds the generated tokens of a run's rows, as Export writes them under l, to acc.
func countRows(ctx context.Context, runDir string, l Limits, acc *shard.Counts, rep *LimitReport) error {
	m, err := shard.ReadManifest(runDir)
	if err != nil {
		return err
	}
	for _, sh := range m.Shards {
		sf, err := shard.Open(filepath.Join(runDir, sh.File))
		if err != nil {
			return err
		}
		cols := []shard.Col{shard.ColID, shard.ColInputIDs, shard.ColLossMask, shard.ColPromptLen, shard.ColCompletionLen}
		err = sf.Scan(ctx, cols, func(r *shard.Row) error {
			if err := r.Validate(m.Merged); err != nil {
				return fmt.Errorf("%s: row %q: %v", sh.File, r.ID, err)
			}
			ids, _, fate := l.apply(r)
			rep.add(r, ids, fate)
			if fate.dropped() {
				return nil
			}
			for _, id := range ids[r.PromptLen:] {
				acc.Add(id, 1)
			}
			return nil
		})
		sf.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// Write writes d2t.npy, t2d.npy, token_counts.tsv and vocab.json into dir, each atomically.
func (v *Vocabulary) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tsv := make([]byte, 0, 16*len(v.Counts)+16)
	tsv = append(tsv, "token_id\tcount\n"...)
	for _, tc := range v.Counts {
		tsv = strconv.AppendInt(tsv, int64(tc.ID), 10)
		tsv = append(tsv, '\t')
		tsv = strconv.AppendInt(tsv, tc.Count, 10)
		tsv = append(tsv, '\n')
	}
	info, err := json.MarshalIndent(v.Info, "", "  ")
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{D2TName: npyInt64(v.D2T), T2DName: npyBool(v.T2D), TokenCountsName: tsv,
		VocabInfoName: append(info, '\n')} {
		if err := shard.WriteFileAtomic(filepath.Join(dir, name), data); err != nil {
			return fmt.Errorf("vocab: %w", err)
		}
	}
	return nil
}

// TargetVocabSize reads the vocabulary size of a model directory's config.json: vocab_size, or
// text_config.vocab_size for multimodal models (as speculators reads it). It can exceed the tokenizer's length.
func TargetVocabSize(modelDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(modelDir, "config.json"))
	if err != nil {
		return 0, err
	}
	var cfg struct {
		VocabSize  int `json:"vocab_size"`
		TextConfig *struct {
			VocabSize int `json:"vocab_size"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(modelDir, "config.json"), err)
	}
	n := cfg.VocabSize
	if cfg.TextConfig != nil && cfg.TextConfig.VocabSize > 0 {
		n = cfg.TextConfig.VocabSize
	}
	if n <= 0 {
		return 0, fmt.Errorf("%s has no vocab_size", filepath.Join(modelDir, "config.json"))
	}
	return n, nil
}
