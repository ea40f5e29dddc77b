package offline

import (
	"bytes"
	"fmt"
	"io"

	"github.com/draftflow/draftflow/shard"
)

// Overlong policies of Limits.
const (
	// OverlongTruncate cuts a row longer than MaxLength to its first MaxLength tokens, as SpecForge and
	// speculators do.
	OverlongTruncate = "truncate"
	// OverlongDrop leaves out a row longer than MaxLength.
	OverlongDrop = "drop"
)

// Limits are the length rules a trainer applies to rows, applied by draftflow instead so that what is cut or
// left out is counted and reported. The zero value keeps every row whole.
type Limits struct {
	// MaxLength is the most tokens a row may have (0: no limit).
	MaxLength int `json:"max_length"`
	// Overlong says what happens to a longer row: OverlongTruncate (default) or OverlongDrop.
	Overlong string `json:"overlong"`
	// MinLossTokens leaves out rows with fewer generated tokens (loss mask 1), counted after truncation
	// (0 or 1: only rows left without any, which only truncation makes).
	MinLossTokens int `json:"min_loss_tokens"`
}

// Validate checks the options.
func (l Limits) Validate() error {
	switch {
	case l.MaxLength < 0:
		return fmt.Errorf("max length %d is negative", l.MaxLength)
	case l.MinLossTokens < 0:
		return fmt.Errorf("min loss tokens %d is negative", l.MinLossTokens)
	case l.Overlong != "" && l.Overlong != OverlongTruncate && l.Overlong != OverlongDrop:
		return fmt.Errorf("overlong %q: want %s or %s", l.Overlong, OverlongTruncate, OverlongDrop)
	}
	return nil
}

// none reports whether the limits change no row a shard holds (every row has at least one generated token).
func (l Limits) none() bool { return l.MaxLength == 0 && l.MinLossTokens <= 1 }

// rowFate is what Limits do to one row.
type rowFate int

const (
	rowKept rowFate = iota
	rowTruncated
	rowDroppedOverlong
	rowDroppedLoss
	// rowCutDropped: longer than MaxLength, truncated, and then left with too few generated tokens.
	rowCutDropped
)

// dropped reports whether the row is left out.
func (f rowFate) dropped() bool {
	return f == rowDroppedOverlong || f == rowDroppedLoss || f == rowCutDropped
}

// apply returns the row's tokens as a trainer would see them (a prefix of r's slices) and the row's fate.
func (l Limits) apply(r *shard.Row) (ids []int32, mask []uint8, fate rowFate) {
	ids, mask = r.InputIDs, r.LossMask
	if l.MaxLength > 0 && len(ids) > l.MaxLength {
		if l.Overlong == OverlongDrop {
			return nil, nil, rowDroppedOverlong
		}
		ids, mask, fate = ids[:l.MaxLength], mask[:l.MaxLength], rowTruncated
	}
	loss := bytes.Count(mask, []byte{1}) // a merged run's rows have ones before prompt_len too
	if loss < max(l.MinLossTokens, 1) {
		if fate == rowTruncated {
			return nil, nil, rowCutDropped
		}
		return nil, nil, rowDroppedLoss
	}
	return ids, mask, fate
}

// LimitReport counts what Limits did to the rows.
type LimitReport struct {
	// Rows read from the shards.
	Rows int64 `json:"rows"`
	// Kept rows written (whole or truncated), and Truncated of them cut to MaxLength.
	Kept      int64 `json:"kept"`
	Truncated int64 `json:"truncated"`
	// DroppedOverlong rows were longer than MaxLength under OverlongDrop; DroppedLoss had fewer than
	// MinLossTokens generated tokens left (after truncation).
	DroppedOverlong int64 `json:"dropped_overlong"`
	DroppedLoss     int64 `json:"dropped_min_loss_tokens"`
	// Overlong counts every row longer than MaxLength, whatever became of it; DroppedLossAfterCut are those
	// of DroppedLoss that truncation left with too few generated tokens.
	Overlong            int64 `json:"overlong"`
	DroppedLossAfterCut int64 `json:"dropped_min_loss_tokens_after_truncation"`
	// TokensCut counts tokens removed by truncation, GeneratedTokensCut those of them with loss mask 1;
	// neither counts dropped rows.
	TokensCut          int64 `json:"tokens_cut"`
	GeneratedTokensCut int64 `json:"generated_tokens_cut"`
}

func (rep *LimitReport) add(r *shard.Row, ids []int32, fate rowFate) {
	rep.Rows++
	switch fate {
	case rowKept:
		rep.Kept++
	case rowTruncated:
		rep.Kept++
		rep.Truncated++
		rep.Overlong++
		rep.TokensCut += int64(len(r.InputIDs) - len(ids))
		rep.GeneratedTokensCut += int64(len(r.InputIDs)) - max(int64(len(ids)), int64(r.PromptLen))
	case rowDroppedOverlong:
		rep.DroppedOverlong++
		rep.Overlong++
	case rowDroppedLoss:
		rep.DroppedLoss++
	case rowCutDropped:
		rep.DroppedLoss++
		rep.DroppedLossAfterCut++
		rep.Overlong++
	}
}

// Print writes the report as one line per fact.
func (rep LimitReport) Print(w io.Writer, l Limits) {
	fmt.Fprintf(w, "rows: %d read, %d kept, %d truncated, %d dropped (%d longer than %d tokens, %d with fewer than %d generated tokens",
		rep.Rows, rep.Kept, rep.Truncated, rep.DroppedOverlong+rep.DroppedLoss, rep.DroppedOverlong, l.MaxLength,
		rep.DroppedLoss, max(l.MinLossTokens, 1))
	if rep.DroppedLossAfterCut > 0 {
		fmt.Fprintf(w, ", %d of them left so by truncation", rep.DroppedLossAfterCut)
	}
	fmt.Fprintln(w, ")")
	if l.MaxLength > 0 {
		fmt.Fprintf(w, "%d rows longer than %d tokens: %d truncated and kept, %d truncated and then dropped, %d dropped whole\n",
			rep.Overlong, l.MaxLength, rep.Truncated, rep.DroppedLossAfterCut, rep.DroppedOverlong)
	}
	if rep.Truncated > 0 {
		fmt.Fprintf(w, "truncation removed %d tokens, %d of them generated (loss mask 1)\n", rep.TokensCut, rep.GeneratedTokensCut)
	}
}
