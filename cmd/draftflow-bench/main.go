// Command draftflow-bench runs draftflow's benchmarks, apart from the shipped draftflow binary:
//
//   - generate: the generate stage's admission policies in a deterministic discrete-event simulation over the
//     in-process SGLang simulator (package bench/generate);
//   - sglang: the same policies against live SGLang servers on this machine, through the draftflow binary's
//     run command, beside SGLang's own bench_serving (package bench/sglang);
//   - pipeline: the pipeline's Kafka throughput, synthetic conversations through every stage on the embedded
//     broker and optionally a real cluster beside it (package bench/pipeline).
//
// Each subcommand is one entry of commands(); its flags are its own function's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/draftflow/draftflow/internal/cli"
)

func commands() []cli.Command {
	return []cli.Command{
		{Name: "generate", Summary: "the generate stage's admission policies on the simulator's clock (steady-state, finite, shared and multi-turn scenarios)", Run: cmdGenerate},
		{Name: "sglang", Summary: "the admission policies against live SGLang servers on this machine, beside SGLang's bench_serving", Run: cmdSGLang},
		{Name: "pipeline", Summary: "the pipeline's Kafka throughput: synthetic conversations through every stage, on the embedded broker and a real one (--brokers)", Run: cmdPipeline},
	}
}

func usage(w io.Writer) { cli.WriteUsage(w, "draftflow-bench", "benchmark", commands()) }

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run dispatches args to a subcommand and returns the process's exit status. SIGINT or SIGTERM cancels the
// subcommand's context: a benchmark stops and returns what it has.
func run(args []string, stderr io.Writer) int {
	if len(args) < 1 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) < 1 {
			return 2
		}
		return 0
	}
	if c, ok := cli.Find(commands(), args[0]); ok {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := c.Run(ctx, args[1:])
		stop()
		switch {
		case errors.Is(err, flag.ErrHelp):
			return 0
		case err != nil:
			fmt.Fprintf(stderr, "draftflow-bench %s: %v\n", c.Name, err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "draftflow-bench: unknown benchmark %q\n\n", args[0])
	usage(stderr)
	return 2
}

func newFlagSet(name string) *flag.FlagSet {
	return flag.NewFlagSet("draftflow-bench "+name, flag.ContinueOnError)
}
