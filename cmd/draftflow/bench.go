package main

import (
	"context"
	"errors"
)

// cmdBench runs the benchmarks that need the binary's own pipeline; the others are draftflow-bench's.
func cmdBench(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "pipeline" {
		return cmdBenchPipeline(ctx, args[1:])
	}
	return errors.New("usage: draftflow bench pipeline [--brokers ADDR] [--records N] [--json]\n" +
		"(the generate and sglang benchmarks are draftflow-bench's: draftflow-bench generate|sglang)")
}
