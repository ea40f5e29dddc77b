// Package testutil holds the helpers the tests of several packages share: a buffer that concurrent loggers may
// write while a test reads it, a wait for a condition, and a Parquet reader that is Arrow's own (not draftflow's
// shard reader), so tests check the files with code other than the code that wrote them. Kafka's test support is
// kafka/kafkatest.
package testutil

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
)

// Buffer is a bytes.Buffer that several goroutines may write (a slog handler's, a child process's output) while
// the test reads it. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitFor calls cond until it holds, and fails t (saying what it waited for) if it does not within timeout. It
// polls every few milliseconds at first and every quarter second at most, so a cheap condition is seen at once
// and an expensive one (reading files) does not spin.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := 5 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %s", what, timeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 250*time.Millisecond)
	}
}

// WriteParquet writes rec to a Parquet file at path with Arrow's writer and its default properties.
func WriteParquet(t testing.TB, path string, rec arrow.Record) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(rec.Schema(), f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// ReadParquet reads the Parquet file at path with Arrow's reader and calls fn with each record batch; col
// returns the batch's column of that name, failing t when there is none.
func ReadParquet(t testing.TB, path string, fn func(rec arrow.Record, col func(name string) arrow.Array)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer tbl.Release()
	tr := array.NewTableReader(tbl, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.Record()
		fn(rec, func(name string) arrow.Array {
			t.Helper()
			idx := rec.Schema().FieldIndices(name)
			if len(idx) != 1 {
				t.Fatalf("%s: no column %q", path, name)
			}
			return rec.Column(idx[0])
		})
	}
}
