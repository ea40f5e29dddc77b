package sink

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
)

// BenchmarkFlush measures a whole durable flush: shard encoding, sha256, write, fsync, checkpoint, rename and
// manifest, on the test's temporary directory.
func BenchmarkFlush(b *testing.B) {
	for _, n := range benchFlushRows {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) { benchFlush(b, n) })
	}
}

// benchFlushRows are the flush sizes of BenchmarkFlush (and of shard.BenchmarkTokenCounting): the small
// flushes of a slow stream and the default RotateRows.
var benchFlushRows = []int{256, DefaultRotateRows}

func benchFlush(b *testing.B, n int) {
	rows := shardtest.TextRows(n)
	var toks int64
	for _, r := range rows {
		toks += int64(r.Tokens())
	}
	runtime.GC()
	st, err := openStore(context.Background(), b.TempDir(), quietLogger())
	if err != nil {
		b.Fatal(err)
	}
	rs := st.run(shard.RunInfo{Model: "bench", Fingerprint: "0123456789abcdef"})
	b.SetBytes(toks * 4)
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for i := 0; i < b.N; i++ {
		off := int64(i) * int64(len(rows))
		if _, err := st.commitFlush(partKey{"generated", 0}, off, off+int64(len(rows))-1, []runRows{{rs, rows}}, DefaultRowGroupRows); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(toks)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(toks)*float64(b.N)/(cpuSeconds()-cpu0), "tokens/cpu-s")
}

// cpuSeconds returns the process's user+system CPU time, so throughput per core is measured even on a busy
// machine where wall time is shared with other processes.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
