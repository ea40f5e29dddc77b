package features

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckAgainstShard: a file with rows and missing rows at their positions passes Check against its shard
// rows; every way it can disagree with them (another id, turn or length at a position, a row too few or too
// many, another header, a damaged block) is reported.
func TestCheckAgainstShard(t *testing.T) {
	dir := t.TempDir()
	h := Header{Hidden: 2, Layers: []string{"aux:2", "aux:4", "aux:5", "final"}}
	rows := []RowRef{{"a", 0, 3}, {"a", 1, 5}, {"b", 0, 2}}
	write := func(name string, rows []RowRef, missing int) string {
		path := filepath.Join(dir, name)
		w, err := Create(path, h)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rows {
			if i == missing {
				if err := w.AddMissing(MissingRow{ID: r.ID, Turn: r.Turn, Row: i, Tokens: r.Tokens, Class: "capture_failed", Reason: "over context"}); err != nil {
					t.Fatal(err)
				}
				continue
			}
			vals := make([]float32, r.Tokens*h.Width())
			for j := range vals {
				vals[j] = float32(i*100 + j)
			}
			if err := w.AddLayersRow(RowInfo{ID: r.ID, Turn: r.Turn, Row: i, Tokens: r.Tokens}, vals); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return path
	}
	check := func(path string, rows []RowRef, want Header) error {
		r, err := Open(path)
		if err != nil {
			return err
		}
		defer r.Close()
		return Check(r, rows, want)
	}
	good := write("good"+Ext, rows, 1)
	if err := check(good, rows, h); err != nil {
		t.Fatalf("a matching file: %v", err)
	}
	for _, tc := range []struct {
		name string
		rows []RowRef
		hdr  Header
		want string
	}{
		{"another id", []RowRef{{"a", 0, 3}, {"a", 1, 5}, {"c", 0, 2}}, h, "position 2"},
		{"another turn", []RowRef{{"a", 0, 3}, {"a", 2, 5}, {"b", 0, 2}}, h, "position 1"},
		{"another length", []RowRef{{"a", 0, 4}, {"a", 1, 5}, {"b", 0, 2}}, h, "position 0"},
		{"a row more in the shard", append(append([]RowRef(nil), rows...), RowRef{"d", 0, 1}), h, "the shard has 4"},
		{"a row fewer in the shard", rows[:2], h, "the shard has 2"},
		{"another hidden size", rows, Header{Hidden: 3}, "hidden size"},
		{"other layers", rows, Header{Layers: []string{"final"}}, "layers"},
	} {
		if err := check(good, tc.rows, tc.hdr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	// A damaged block: one byte of the first row's block flipped.
	b, _ := os.ReadFile(good)
	b[len(Magic)] ^= 0xff
	bad := filepath.Join(dir, "bad"+Ext)
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := check(bad, rows, h); err == nil || !strings.Contains(err.Error(), "CRC") {
		t.Errorf("a damaged block: %v, want a CRC mismatch", err)
	}
	// Two turns of one id are two rows; the same (id, turn) twice is refused.
	w, err := Create(filepath.Join(dir, "dup"+Ext), h)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if err := w.AddMissing(MissingRow{ID: "a", Turn: 0}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddLayersRow(RowInfo{ID: "a", Turn: 0, Row: 1, Tokens: 1}, make([]float32, 8)); err == nil {
		t.Error("the same id and turn twice was accepted")
	}
}
