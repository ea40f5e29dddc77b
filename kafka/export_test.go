package kafka

// SamplePeakHeap samples the Go heap in use until the returned function returns its peak in MiB (benchmarks).
var SamplePeakHeap = samplePeakHeap
