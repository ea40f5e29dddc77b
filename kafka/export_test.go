package kafka

// CrashHook arms c to crash (stop without draining or committing, as a killed process would) when the returned
// function is called; that function then returns, once Run has returned, how many handed-out deliveries were
// left uncommitted: the most work the crash may cause to be done again.
func CrashHook(c *Consumer) (arm func(), window func() int) {
	c.crash = make(chan struct{})
	return func() { close(c.crash) }, func() int { return c.crashWindow }
}

// SamplePeakHeap samples the Go heap in use until the returned function returns its peak in MiB (benchmarks).
var SamplePeakHeap = samplePeakHeap
