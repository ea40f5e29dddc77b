package features

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestManifestWriterConcurrentAdds: Adds of many shards at once, to two run directories, lose none of them (each
// Add reads, changes and rewrites the whole file), keep the entries sorted, and an Add of a listed shard
// replaces its entry.
func TestManifestWriterConcurrentAdds(t *testing.T) {
	t.Parallel()
	dirs := []string{t.TempDir(), t.TempDir()}
	h := Header{Hidden: 8, Layers: []string{"aux:2", "final"}, Codec: CodecZstd}
	var w ManifestWriter
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		for _, dir := range dirs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				shard := fmt.Sprintf("generated+0+%012d-%012d.parquet", i, i)
				errs <- w.Add(dir, h, FileEntry{Shard: shard, File: PathFor(shard), Rows: i})
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range dirs {
		m, err := ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Files) != 32 || !slices.IsSortedFunc(m.Files, func(a, b FileEntry) int { return strings.Compare(a.Shard, b.Shard) }) {
			t.Fatalf("%s: %d entries (want 32, sorted by shard)", filepath.Base(dir), len(m.Files))
		}
	}
	first := dirs[0]
	m, _ := ReadManifest(first)
	e := m.Files[3]
	e.Rows = 1000
	if err := w.Add(first, h, e); err != nil {
		t.Fatal(err)
	}
	m, _ = ReadManifest(first)
	if len(m.Files) != 32 || m.Files[3].Rows != 1000 {
		t.Fatalf("replacing an entry: %d entries, rows %d", len(m.Files), m.Files[3].Rows)
	}
}
