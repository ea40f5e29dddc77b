package kafka

import (
	"runtime"
	"time"
)

// SamplePeakHeap samples the Go heap in use until the returned function returns its peak in MiB (benchmarks).
var SamplePeakHeap = samplePeakHeap

// samplePeakHeap collects garbage, then samples the Go heap in use (what the process holds, pooled buffers
// included) every 2 ms until the returned function is called; that returns the peak in MiB.
func samplePeakHeap() (stop func() float64) {
	runtime.GC()
	var peak uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() float64 {
		close(done)
		<-sampled
		return float64(peak) / (1 << 20)
	}
}
