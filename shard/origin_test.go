package shard

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/topics"
)

// Each row's origin is written as it was given (empty as generated), read back, and counted by origin in the
// shard's manifest entry.
func TestOriginColumn(t *testing.T) {
	t.Parallel()
	rows := []*WriteRow{
		{ID: "g", Prompt: []uint32{1}, Output: []uint32{2}},
		{ID: "r", Origin: topics.OriginResult, Prompt: []uint32{1}, Output: []uint32{2}},
		{ID: "b", Origin: topics.OriginRecord, Prompt: []uint32{1}, Output: []uint32{2}},
		{ID: "d", Origin: topics.OriginDataset, Prompt: []uint32{1}, Output: []uint32{2}},
		{ID: "d", Turn: 1, Origin: topics.OriginDataset, Prompt: []uint32{1, 2, 3}, Output: []uint32{4}},
	}
	path := filepath.Join(t.TempDir(), "s.parquet")
	entry, err := WriteFile(path, RunInfo{Fingerprint: "f"}, Origin{Topic: "generated"}, rows, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{topics.OriginGenerated: 1, topics.OriginResult: 1, topics.OriginRecord: 1, topics.OriginDataset: 2}
	if !maps.Equal(entry.Origins, want) {
		t.Errorf("manifest entry counts %v, want %v", entry.Origins, want)
	}
	got := readOrigins(t, path, nil)
	if w := []string{"generated", "result", "record", "dataset", "dataset"}; !slices.Equal(got, w) {
		t.Errorf("origins read %v, want %v", got, w)
	}
	if got := readOrigins(t, path, []Col{ColID}); !slices.Equal(got, []string{"", "", "", "", ""}) {
		t.Errorf("origins of a scan that did not read the column: %v", got)
	}
}

// Shards written before the origin column (11 columns), and before stop_reason and reply (9), are read; every
// row's origin is generated.
func TestOlderShardsReadAsGenerated(t *testing.T) {
	t.Parallel()
	for _, n := range []int{9, 11} {
		path := filepath.Join(t.TempDir(), "old.parquet")
		writeOldShard(t, path, n)
		if got := readOrigins(t, path, nil); !slices.Equal(got, []string{"generated", "generated"}) {
			t.Errorf("%d columns: origins %v", n, got)
		}
		if got := readOrigins(t, path, []Col{ColID, ColOrigin}); !slices.Equal(got, []string{"generated", "generated"}) {
			t.Errorf("%d columns, origin asked for: origins %v", n, got)
		}
	}
}

// A manifest written before origins were counted reads as every row generated, and writing it again counts so.
func TestManifestOrigins(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old := `{"format_version":1,"run":{"model":"m","tokenizer_hash":"h","sampling":{},"fingerprint":"f"},"schema":[],` +
		`"shards":[{"file":"a.parquet","rows":3,"tokens":6},{"file":"b.parquet","rows":2,"tokens":4,"origins":{"result":2}}],` +
		`"totals":{"shards":2,"rows":5,"tokens":10}}`
	if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Shards[0].OriginCounts(); !maps.Equal(got, map[string]int64{topics.OriginGenerated: 3}) {
		t.Errorf("old shard entry counts %v", got)
	}
	if err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	if m, err = ReadManifest(dir); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{topics.OriginGenerated: 3, topics.OriginResult: 2}; !maps.Equal(m.Origins, want) {
		t.Errorf("manifest origins %v, want %v", m.Origins, want)
	}
}

func TestRowValidateOrigin(t *testing.T) {
	t.Parallel()
	r := Row{ID: "x", InputIDs: []int32{1, 2}, LossMask: []uint8{0, 1}, PromptLen: 1, CompletionLen: 1, Origin: "bogus"}
	if err := r.Validate(false); err == nil {
		t.Error("a row of an unknown origin is valid")
	}
	r.Origin = topics.OriginRecord
	if err := r.Validate(false); err != nil {
		t.Error(err)
	}
}

func readOrigins(t *testing.T, path string, cols []Col) []string {
	t.Helper()
	sf, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	var got []string
	if err := sf.Scan(context.Background(), cols, func(r *Row) error { got = append(got, r.Origin); return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// writeOldShard writes a shard of two rows with the first n columns of the schema, as older builds wrote them.
func writeOldShard(t *testing.T, path string, n int) {
	t.Helper()
	sc := arrow.NewSchema(schema.Fields()[:n], nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for row := range 2 {
		for i, f := range sc.Fields() {
			switch fb := b.Field(i).(type) {
			case *array.StringBuilder:
				fb.Append(f.Name + string(rune('a'+row)))
			case *array.Int32Builder:
				fb.Append(1)
			case *array.ListBuilder:
				fb.Append(true)
				switch vb := fb.ValueBuilder().(type) {
				case *array.Int32Builder:
					vb.AppendValues([]int32{5, 6}, nil)
				case *array.Uint8Builder:
					vb.AppendValues([]uint8{0, 1}, nil)
				}
			default:
				t.Fatalf("column %s: unexpected builder %T", f.Name, fb)
			}
		}
	}
	rec := b.NewRecord()
	defer rec.Release()
	testutil.WriteParquet(t, path, rec)
}
