package features

import (
	"fmt"
	"strings"
)

// Ext is the extension of a shard's feature file, which lies beside the shard: X.parquet's is X.dff (the extension the trainers' loader, python/draftflow_data/offline.py, lists).
const Ext = ".dff"

// PathFor returns the feature file path of the shard at shardPath.
func PathFor(shardPath string) string { return strings.TrimSuffix(shardPath, ".parquet") + Ext }

// RowRef names one row of a shard as a feature file must hold it.
type RowRef struct {
	ID     string
	Turn   int
	Tokens int
}

// Check reports whether r is the complete feature file of a shard of rows (in shard order): every row is in
// r.Index.Rows or r.Index.Missing at its position with its id, turn and token count, nothing else is, the
// header is want's (Hidden 0: any hidden size), and every block's CRC matches (Verify). It returns nil or what
// is wrong.
func Check(r *Reader, rows []RowRef, want Header) error {
	h := r.Index.Header
	if want.Hidden != 0 && h.Hidden != want.Hidden {
		return fmt.Errorf("hidden size %d, want %d", h.Hidden, want.Hidden)
	}
	if want.Layers != nil && strings.Join(h.Layers, ",") != strings.Join(want.Layers, ",") {
		return fmt.Errorf("layers %v, want %v", h.Layers, want.Layers)
	}
	if n := len(r.Index.Rows) + len(r.Index.Missing); n != len(rows) {
		return fmt.Errorf("%d rows (%d with features, %d missing), the shard has %d", n, len(r.Index.Rows), len(r.Index.Missing), len(rows))
	}
	seen := make([]bool, len(rows))
	at := func(pos int, id string, turn, tokens int) error {
		if pos < 0 || pos >= len(rows) {
			return fmt.Errorf("row %s at position %d, the shard has %d rows", id, pos, len(rows))
		}
		if seen[pos] {
			return fmt.Errorf("position %d twice", pos)
		}
		seen[pos] = true
		if w := rows[pos]; w.ID != id || w.Turn != turn || w.Tokens != tokens {
			return fmt.Errorf("position %d holds row %s turn %d of %d tokens, the shard row %s turn %d of %d tokens",
				pos, id, turn, tokens, w.ID, w.Turn, w.Tokens)
		}
		return nil
	}
	for _, x := range r.Index.Rows {
		if err := at(x.Row, x.ID, x.Turn, x.Tokens); err != nil {
			return err
		}
	}
	for _, x := range r.Index.Missing {
		if err := at(x.Row, x.ID, x.Turn, x.Tokens); err != nil {
			return err
		}
	}
	return r.Verify()
}
