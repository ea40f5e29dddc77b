package offline

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/topics"
)

// readNpy1D decodes what npy1D wrote (version 1.0, one dimension): the descr, the length and the data.
func readNpy1D(b []byte) (descr string, n int, data []byte, err error) {
	if len(b) < 10 || string(b[:8]) != "\x93NUMPY\x01\x00" {
		return "", 0, nil, fmt.Errorf("not a version 1.0 .npy file")
	}
	hl := int(binary.LittleEndian.Uint16(b[8:10]))
	if len(b) < 10+hl {
		return "", 0, nil, fmt.Errorf("truncated .npy header")
	}
	h := string(b[10 : 10+hl])
	var shape string
	if _, err := fmt.Sscanf(h, "{'descr': '%3s', 'fortran_order': False, 'shape': (%s", &descr, &shape); err != nil {
		return "", 0, nil, fmt.Errorf("unexpected .npy header %q", h)
	}
	n, err = strconv.Atoi(shape[:bytes.IndexByte([]byte(shape), ',')])
	if err != nil {
		return "", 0, nil, fmt.Errorf("unexpected .npy shape in %q", h)
	}
	return descr, n, b[10+hl:], nil
}

func TestNpyMatchesNumpySave(t *testing.T) {
	t.Parallel()
	// np.save(f, np.array([1, -2, 3], dtype=np.int64)): 128 bytes, header padded to 118 (10 + 118 = 128).
	b := npyInt64([]int64{1, -2, 3})
	want := "\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }" + strings.Repeat(" ", 60) + "\n"
	if string(b[:128]) != want || len(b) != 128+24 {
		t.Fatalf("int64 header %q (%d bytes), want %q", b[:min(len(b), 128)], len(b), want)
	}
	if v := int64(binary.LittleEndian.Uint64(b[128+8:])); v != -2 {
		t.Fatalf("second value %d", v)
	}
	for _, n := range []int{0, 1, 5, 151_936, 1 << 20} {
		bb := npyBool(make([]bool, n))
		descr, got, data, err := readNpy1D(bb)
		if err != nil || descr != "|b1" || got != n || len(data) != n || (len(bb)-len(data))%64 != 0 {
			t.Fatalf("bool[%d]: %q %d %d %v, data at %d", n, descr, got, len(data), err, len(bb)-len(data))
		}
		dict := fmt.Sprintf("{'descr': '|b1', 'fortran_order': False, 'shape': (%d,), }", n)
		if hdr := string(bb[10 : len(bb)-len(data)]); strings.TrimRight(hdr, " \n") != dict || !strings.HasSuffix(hdr, " \n") {
			t.Fatalf("bool[%d] header %q", n, hdr)
		}
	}
}

func TestVocabSelection(t *testing.T) {
	t.Parallel()
	v := &Vocabulary{Info: VocabInfo{DraftVocabSize: 4, TargetVocabSize: 10},
		Counts: []shard.TokenCount{{ID: 1, Count: 5}, {ID: 3, Count: 2}, {ID: 4, Count: 7}, {ID: 6, Count: 2}, {ID: 8, Count: 2}, {ID: 9, Count: 1}}}
	v.choose()
	// 4 (7), 1 (5), then the tie at 2 between 3, 6 and 8 goes to the lowest ids: 3 and 6.
	if !slices.Equal(v.Selected, []int32{1, 3, 4, 6}) {
		t.Fatalf("selected %v", v.Selected)
	}
	if !slices.Equal(v.D2T, []int64{1, 2, 2, 3}) || v.Info.SelectedTokens != 16 {
		t.Fatalf("d2t %v, selected tokens %d", v.D2T, v.Info.SelectedTokens)
	}
	for id, in := range v.T2D {
		if in != slices.Contains(v.Selected, int32(id)) {
			t.Fatalf("t2d[%d] = %v", id, in)
		}
	}
	// Fewer ids than the draft vocabulary: padded with the lowest unused ids.
	v = &Vocabulary{Info: VocabInfo{DraftVocabSize: 5, TargetVocabSize: 10}, Counts: []shard.TokenCount{{ID: 2, Count: 1}, {ID: 7, Count: 3}}}
	v.choose()
	if !slices.Equal(v.Selected, []int32{0, 1, 2, 3, 7}) || len(v.T2D) != 10 {
		t.Fatalf("padded selection %v", v.Selected)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	r := &shard.Row{ID: "x", InputIDs: []int32{1, 2, 3, 4, 5, 6}, LossMask: []uint8{0, 0, 0, 1, 1, 1}, PromptLen: 3, CompletionLen: 3}
	for _, tc := range []struct {
		l    Limits
		n    int
		fate rowFate
	}{
		{Limits{}, 6, rowKept},
		{Limits{MaxLength: 6}, 6, rowKept},
		{Limits{MaxLength: 5}, 5, rowTruncated},
		{Limits{MaxLength: 3}, 0, rowCutDropped}, // no generated token left after the cut
		{Limits{MaxLength: 5, Overlong: OverlongDrop}, 0, rowDroppedOverlong},
		{Limits{MinLossTokens: 3}, 6, rowKept},
		{Limits{MinLossTokens: 4}, 0, rowDroppedLoss},
		{Limits{MaxLength: 5, MinLossTokens: 3}, 0, rowCutDropped}, // counted after truncation, as the trainers do
	} {
		ids, mask, fate := tc.l.apply(r)
		if fate != tc.fate || len(ids) != tc.n || len(mask) != tc.n {
			t.Errorf("%+v: %d tokens, fate %d; want %d, %d", tc.l, len(ids), fate, tc.n, tc.fate)
		}
	}
	var rep LimitReport
	ids, _, fate := Limits{MaxLength: 4}.apply(r)
	rep.add(r, ids, fate)
	if rep != (LimitReport{Rows: 1, Kept: 1, Truncated: 1, Overlong: 1, TokensCut: 2, GeneratedTokensCut: 2}) {
		t.Fatalf("report %+v", rep)
	}
	// A row that the cut leaves with no generated token is counted as longer than the limit, and as dropped
	// because of the cut: the summary does not say "0 longer than".
	cut := Limits{MaxLength: 3}
	ids, _, fate = cut.apply(r)
	rep.add(r, ids, fate)
	if rep.Overlong != 2 || rep.DroppedLoss != 1 || rep.DroppedLossAfterCut != 1 {
		t.Fatalf("report %+v", rep)
	}
	var sum strings.Builder
	rep.Print(&sum, cut)
	for _, want := range []string{"2 read, 1 kept, 1 truncated, 1 dropped", "1 of them left so by truncation",
		"2 rows longer than 3 tokens: 1 truncated and kept, 1 truncated and then dropped, 0 dropped whole"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary %q does not say %q", sum.String(), want)
		}
	}
	if (Limits{Overlong: "wrap"}).Validate() == nil || (Limits{MaxLength: -1}).Validate() == nil {
		t.Fatal("bad limits accepted")
	}
}

func TestExportOneRunWithLimits(t *testing.T) {
	t.Parallel()
	dir, a, _ := twoRunDir(t)
	ra := shard.RunOf(a[0]).DirName()
	if _, err := Export(context.Background(), dir, ExportOptions{Format: FormatSpecForge}, &bytes.Buffer{}); err == nil {
		t.Fatal("export of two runs without --run")
	}
	lim := Limits{MaxLength: 40, MinLossTokens: 5}
	var buf bytes.Buffer
	rep, err := Export(context.Background(), dir, ExportOptions{Format: FormatSpeculators, Runs: []string{ra}, Limits: lim}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	var want LimitReport
	byID := map[string]*topics.Generation{}
	for _, g := range a {
		byID[g.ID] = g
		ids := append(slices.Clone(g.PromptIDs), g.OutputIDs...)
		r := &shard.Row{ID: g.ID, PromptLen: int32(len(g.PromptIDs)), CompletionLen: int32(len(g.OutputIDs)), LossMask: make([]uint8, len(ids))}
		for i, id := range ids {
			r.InputIDs = append(r.InputIDs, int32(id))
			if i >= len(g.PromptIDs) {
				r.LossMask[i] = 1
			}
		}
		kept, _, fate := lim.apply(r)
		want.add(r, kept, fate)
	}
	if rep != want || rep.Truncated == 0 || rep.DroppedLoss == 0 {
		t.Fatalf("report %+v, want %+v (with some truncated and dropped)", rep, want)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if int64(len(lines)) != rep.Kept {
		t.Fatalf("%d lines, report says %d kept", len(lines), rep.Kept)
	}
	for _, l := range lines {
		var row struct {
			PrimaryID string  `json:"primary_id"`
			InputIDs  []int64 `json:"input_ids"`
			LossMask  []int   `json:"loss_mask"`
			Metadata  struct {
				TruncatedFrom int `json:"truncated_from"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatal(err)
		}
		g := byID[row.PrimaryID]
		full := len(g.PromptIDs) + len(g.OutputIDs)
		if len(row.InputIDs) != min(full, 40) || len(row.LossMask) != len(row.InputIDs) {
			t.Fatalf("%s: %d tokens of %d", row.PrimaryID, len(row.InputIDs), full)
		}
		if (full > 40) != (row.Metadata.TruncatedFrom == full) {
			t.Fatalf("%s: truncated_from %d for %d tokens", row.PrimaryID, row.Metadata.TruncatedFrom, full)
		}
		loss := 0
		for i, m := range row.LossMask {
			if want := i >= len(g.PromptIDs); (m == 1) != want || idAt(g, i) != row.InputIDs[i] {
				t.Fatalf("%s: token %d differs", row.PrimaryID, i)
			}
			loss += m
		}
		if loss < 5 {
			t.Fatalf("%s kept with %d loss tokens", row.PrimaryID, loss)
		}
	}
}

func TestVocabFromSinkAndRows(t *testing.T) {
	t.Parallel()
	dir, a, b := twoRunDir(t)
	ra := shard.RunOf(a[0]).DirName()
	v, err := Vocab(context.Background(), dir, VocabOptions{Runs: []string{ra}, DraftVocabSize: 32, TargetVocabSize: 151_000})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	var total int64
	for _, g := range a {
		for _, id := range g.OutputIDs {
			want[int32(id)]++
			total++
		}
	}
	if v.Info.Source != "sink" || v.Info.GeneratedTokens != total || len(v.Counts) != len(want) {
		t.Fatalf("info %+v; want %d tokens, %d ids", v.Info, total, len(want))
	}
	for _, tc := range v.Counts {
		if want[tc.ID] != tc.Count {
			t.Fatalf("id %d: %d, want %d", tc.ID, tc.Count, want[tc.ID])
		}
	}
	// Both runs, counted from rows under limits: equal to counting the export.
	lim := Limits{MaxLength: 30, Overlong: OverlongDrop}
	v2, err := Vocab(context.Background(), dir, VocabOptions{Runs: []string{ra, shard.RunOf(b[0]).DirName()}, DraftVocabSize: 32, TargetVocabSize: 151_000, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	exported := map[int32]int64{}
	for _, name := range v2.Info.Runs {
		var buf bytes.Buffer
		if _, err := Export(context.Background(), dir, ExportOptions{Format: FormatSpecForge, Runs: []string{filepath.Base(name)}, Limits: lim}, &buf); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var row struct {
				InputIDs []int32 `json:"input_ids"`
				LossMask []int   `json:"loss_mask"`
			}
			json.Unmarshal([]byte(l), &row)
			for i, m := range row.LossMask {
				if m == 1 {
					exported[row.InputIDs[i]]++
				}
			}
		}
	}
	if v2.Info.Source != "rows" || len(v2.Counts) != len(exported) || v2.Info.Report.DroppedOverlong == 0 {
		t.Fatalf("rows vocab %+v, %d ids exported", v2.Info, len(exported))
	}
	for _, tc := range v2.Counts {
		if exported[tc.ID] != tc.Count {
			t.Fatalf("id %d: %d, export has %d", tc.ID, tc.Count, exported[tc.ID])
		}
	}
	// Written files.
	out := t.TempDir()
	if err := v.Write(out); err != nil {
		t.Fatal(err)
	}
	d2t, _ := os.ReadFile(filepath.Join(out, D2TName))
	descr, n, data, err := readNpy1D(d2t)
	if err != nil || descr != "<i8" || n != 32 || len(data) != 8*32 {
		t.Fatalf("d2t.npy: %q %d %d %v", descr, n, len(data), err)
	}
	for d := 0; d < n; d++ {
		if tgt := int64(binary.LittleEndian.Uint64(data[8*d:])) + int64(d); tgt != int64(v.Selected[d]) {
			t.Fatalf("d2t[%d] + %d = %d, selected %d", d, d, tgt, v.Selected[d])
		}
	}
	t2d, _ := os.ReadFile(filepath.Join(out, T2DName))
	descr, n, data, err = readNpy1D(t2d)
	if err != nil || descr != "|b1" || n != 151_000 || len(data) != n || bytes.Count(data, []byte{1}) != 32 {
		t.Fatalf("t2d.npy: %q %d %d %v", descr, n, len(data), err)
	}
	tsv, _ := os.ReadFile(filepath.Join(out, TokenCountsName))
	lines := strings.Split(strings.TrimSpace(string(tsv)), "\n")
	if lines[0] != "token_id\tcount" || len(lines)-1 != len(v.Counts) {
		t.Fatalf("token_counts.tsv has %d lines", len(lines))
	}
	if f := strings.Split(lines[1], "\t"); f[0] != strconv.Itoa(int(v.Counts[0].ID)) || f[1] != strconv.FormatInt(v.Counts[0].Count, 10) {
		t.Fatalf("first line %q", lines[1])
	}
	// Errors: an id beyond the target vocabulary, a draft vocabulary larger than the target's.
	if _, err := Vocab(context.Background(), dir, VocabOptions{Runs: []string{ra}, DraftVocabSize: 8, TargetVocabSize: 1000}); err == nil || !strings.Contains(err.Error(), "target vocabulary") {
		t.Fatalf("id past the vocabulary: %v", err)
	}
	if _, err := Vocab(context.Background(), dir, VocabOptions{Runs: []string{ra}, DraftVocabSize: 8, TargetVocabSize: 4}); err == nil {
		t.Fatal("draft vocabulary larger than the target's accepted")
	}
}

func TestTargetVocabSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"vocab_size": 151936, "hidden_size": 8}`), 0o644)
	if n, err := TargetVocabSize(dir); err != nil || n != 151936 {
		t.Fatalf("%d %v", n, err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"text_config": {"vocab_size": 262208}}`), 0o644)
	if n, err := TargetVocabSize(dir); err != nil || n != 262208 {
		t.Fatalf("text_config: %d %v", n, err)
	}
	if _, err := TargetVocabSize(t.TempDir()); err == nil {
		t.Fatal("no config.json accepted")
	}
}

// idAt is the i-th token of a generation's row: prompt ids, then output ids.
func idAt(g *topics.Generation, i int) int64 {
	if i < len(g.PromptIDs) {
		return int64(g.PromptIDs[i])
	}
	return int64(g.OutputIDs[i-len(g.PromptIDs)])
}
