package ingest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/draftflow/draftflow/topics"
)

type seen struct {
	prompts map[int64]topics.Prompt
	errs    map[int64]error
	raw     map[int64]int // raw length per line
}

func collect(t *testing.T, path string, opt readOptions) seen {
	t.Helper()
	s := seen{prompts: map[int64]topics.Prompt{}, errs: map[int64]error{}, raw: map[int64]int{}}
	err := readFile(context.Background(), path, opt, func(p topics.Prompt, err error, src topics.Source, raw []byte) error {
		if src.File != path {
			t.Errorf("source file %q, want %q", src.File, path)
		}
		if _, dup := s.raw[src.Line]; dup {
			t.Errorf("line %d reported twice", src.Line)
		}
		s.raw[src.Line] = len(raw)
		if err != nil {
			s.errs[src.Line] = err
		} else {
			if p.Source != src {
				t.Errorf("prompt source %+v, callback source %+v", p.Source, src)
			}
			s.prompts[src.Line] = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func userLine(id, content string) string {
	return fmt.Sprintf(`{"id": %q, "messages": [{"role": "user", "content": %q}]}`, id, content)
}

func TestReadJSONLLinesAndErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mixed.jsonl")
	huge := strings.Repeat("word ", 700_000) // 3.5 MB: far over bufio's buffer, under the limit
	var b bytes.Buffer
	b.WriteString("\xef\xbb\xbf" + userLine("bom", "first") + "\r\n") // 1: BOM and CRLF
	b.WriteString("\n")                                               // 2: blank, skipped
	b.WriteString(userLine("big", huge) + "\n")                       // 3
	b.WriteString(`{"id": "x", "messages": [` + "\n")                 // 4: invalid JSON
	b.WriteString(userLine("after", "ok") + "\n")                     // 5
	b.WriteString("   \t\r\n")                                        // 6: whitespace only, skipped
	b.WriteString(userLine("toolong", strings.Repeat("y", 5000)) + "\n")
	b.WriteString(userLine("last", "no newline at end")) // 8
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s := collect(t, path, readOptions{maxLineBytes: 4 << 20})
	for line, id := range map[int64]string{1: "bom", 3: "big", 5: "after", 8: "last"} {
		p, ok := s.prompts[line]
		if !ok || p.ID != id {
			t.Errorf("line %d: prompt %q (err %v), want %q", line, p.ID, s.errs[line], id)
		}
		if p.Dataset != "mixed" {
			t.Errorf("line %d: dataset %q", line, p.Dataset)
		}
	}
	if got := s.prompts[3].Messages[0].Content; got != huge {
		t.Errorf("long line content is %d bytes, want %d", len(got), len(huge))
	}
	if ReasonOf(s.errs[4]) != ReasonInvalidJSON {
		t.Errorf("line 4: %v", s.errs[4])
	}
	if _, ok := s.prompts[7]; !ok {
		t.Errorf("line 7: %v", s.errs[7])
	}
	if len(s.prompts)+len(s.errs) != 6 {
		t.Errorf("%d prompts + %d errors; blank lines must be skipped", len(s.prompts), len(s.errs))
	}

	// The same file with a small limit: line 3 and 7 are rejected as too long, the rest still parse.
	s = collect(t, path, readOptions{maxLineBytes: 4096, dataset: "forced"})
	for _, line := range []int64{3, 7} {
		if ReasonOf(s.errs[line]) != ReasonLineTooLong || !strings.Contains(s.errs[line].Error(), "over the 4096-byte limit") {
			t.Errorf("line %d: %v, want line too long", line, s.errs[line])
		}
		if s.raw[line] != 4096 {
			t.Errorf("line %d payload %d bytes, want the first 4096", line, s.raw[line])
		}
	}
	for _, line := range []int64{1, 5, 8} {
		if p, ok := s.prompts[line]; !ok || p.Dataset != "forced" {
			t.Errorf("line %d after an oversized line: %+v %v", line, p, s.errs[line])
		}
	}
}

func TestLineReaderBoundaries(t *testing.T) {
	for _, max := range []int{1, 2, 3, 7, 16} {
		for _, n := range []int{0, 1, max - 1, max, max + 1, max + 2, 3 * max} {
			if n < 0 {
				continue
			}
			for _, term := range []string{"\n", "\r\n", ""} {
				line := strings.Repeat("a", n)
				path := filepath.Join(t.TempDir(), "b.jsonl")
				os.WriteFile(path, []byte(line+term+"zz\n"), 0o644)
				f, _ := os.Open(path)
				lr := &lineReader{r: bufioReader(f, 16), max: max}
				got, size, err := lr.next()
				f.Close()
				wantSize := n
				if term == "" {
					wantSize += 2 // the next line is glued on
				}
				if err != nil || size != wantSize {
					t.Fatalf("max %d n %d term %q: size %d err %v", max, n, term, size, err)
				}
				if term == "" {
					continue
				}
				want := line[:min(n, max)]
				if string(got) != want {
					t.Fatalf("max %d n %d term %q: got %q want %q", max, n, term, got, want)
				}
			}
		}
	}
}

func TestReadCompressed(t *testing.T) {
	dir := t.TempDir()
	content := userLine("a", "one") + "\n" + "{bad\n" + userLine("b", "two") + "\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(content))
	zw.Close()
	enc, _ := zstd.NewWriter(nil)
	files := map[string][]byte{
		"g.jsonl.gz":  gz.Bytes(),
		"z.jsonl.zst": enc.EncodeAll([]byte(content), nil),
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		os.WriteFile(path, data, 0o644)
		var progressed int64
		s := collect(t, path, readOptions{progress: func(n int64) { progressed += n }})
		if s.prompts[1].ID != "a" || s.prompts[3].ID != "b" || ReasonOf(s.errs[2]) != ReasonInvalidJSON {
			t.Errorf("%s: prompts %v errs %v", name, s.prompts, s.errs)
		}
		if want := DatasetName(path); s.prompts[1].Dataset != want || want != name[:1] {
			t.Errorf("%s: dataset %q", name, s.prompts[1].Dataset)
		}
		if progressed != int64(len(data)) {
			t.Errorf("%s: progress %d bytes, file is %d", name, progressed, len(data))
		}
	}
}

func TestDatasetNameAndInputs(t *testing.T) {
	for in, want := range map[string]string{
		"data/glaive.jsonl":      "glaive",
		"x/B2_code.jsonl.zst":    "B2_code",
		"a.b.parquet":            "a.b",
		"plain":                  "plain",
		"/tmp/sharegpt.JSONL.GZ": "sharegpt",
		".jsonl":                 ".jsonl",
	} {
		if got := DatasetName(in); got != want {
			t.Errorf("DatasetName(%q) = %q, want %q", in, got, want)
		}
	}
	dir := t.TempDir()
	for _, n := range []string{"b.jsonl", "a.parquet", "notes.txt", "c.jsonl.zst"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	got, err := ExpandInputs([]string{dir, filepath.Join(dir, "notes.txt")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a.parquet", "b.jsonl", "c.jsonl.zst", "notes.txt"}
	for i := range want {
		want[i] = filepath.Join(dir, want[i])
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("ExpandInputs = %v, want %v", got, want)
	}
	if _, err := ExpandInputs([]string{filepath.Join(dir, "missing.jsonl")}); err == nil {
		t.Error("missing input accepted")
	}
}

// ReadFile on the bundled sample agrees with expected.json line by line.
func TestReadSample(t *testing.T) {
	exp := loadExpected(t)
	var ids []string
	bad := map[int64]Reason{}
	err := ReadFile(samplePath, func(p topics.Prompt, err error, src topics.Source, raw []byte) error {
		if err != nil {
			bad[src.Line] = ReasonOf(err)
			return nil
		}
		if p.Dataset != "conversations" {
			t.Errorf("line %d: dataset %q", src.Line, p.Dataset)
		}
		ids = append(ids, p.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != exp.Valid || strings.Join(ids, ",") != strings.Join(exp.IDs, ",") {
		t.Fatalf("%d prompts, expected.json has %d valid; ids differ: %v", len(ids), exp.Valid, len(ids) == len(exp.IDs))
	}
	for _, m := range exp.Malformed {
		if bad[m.Line] != Reason(m.Reason) {
			t.Errorf("line %d: reason %q, want %q", m.Line, bad[m.Line], m.Reason)
		}
	}
	if len(bad) != len(exp.MalformedLines) {
		t.Errorf("%d lines rejected, want %d: %v", len(bad), len(exp.MalformedLines), bad)
	}
}
