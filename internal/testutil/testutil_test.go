package testutil

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// fatalTB records a Fatalf and ends the goroutine as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a fatalTB in a goroutine of its own and returns what it failed with ("" for nothing).
func run(t *testing.T, fn func(tb testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

func TestBufferConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				fmt.Fprint(&b, "x")
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 800) {
		t.Fatalf("%d bytes, want 800", len(got))
	}
}

func TestWaitFor(t *testing.T) {
	start := time.Now()
	n := 0
	if msg := run(t, func(tb testing.TB) { WaitFor(tb, time.Minute, "three calls", func() bool { n++; return n == 3 }) }); msg != "" {
		t.Fatalf("failed: %s", msg)
	}
	if n != 3 || time.Since(start) > time.Second {
		t.Errorf("%d calls in %s", n, time.Since(start))
	}
	msg := run(t, func(tb testing.TB) { WaitFor(tb, 50*time.Millisecond, "never", func() bool { return false }) })
	if msg != "never did not happen within 50ms" {
		t.Errorf("failed with %q", msg)
	}
}

func TestReadParquet(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "n", Type: arrow.PrimitiveTypes.Int32}}, nil)
	bld := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer bld.Release()
	bld.Field(0).(*array.StringBuilder).AppendValues([]string{"a", "b", "c"}, nil)
	bld.Field(1).(*array.Int32Builder).AppendValues([]int32{1, 2, 3}, nil)
	rec := bld.NewRecord()
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "x.parquet")
	WriteParquet(t, path, rec)
	var got []string
	ReadParquet(t, path, func(rec arrow.Record, col func(string) arrow.Array) {
		ids, ns := col("id").(*array.String), col("n").(*array.Int32)
		for i := 0; i < int(rec.NumRows()); i++ {
			got = append(got, fmt.Sprintf("%s=%d", ids.Value(i), ns.Value(i)))
		}
	})
	if strings.Join(got, ",") != "a=1,b=2,c=3" {
		t.Fatalf("read %v", got)
	}
	msg := run(t, func(tb testing.TB) {
		ReadParquet(tb, path, func(_ arrow.Record, col func(string) arrow.Array) { col("nope") })
	})
	if !strings.Contains(msg, `no column "nope"`) {
		t.Errorf("a missing column failed with %q", msg)
	}
}
