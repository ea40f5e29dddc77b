package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	pipelinebench "github.com/draftflow/draftflow/bench/pipeline"
	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/kafka"
)

// cmdPipeline measures the pipeline's Kafka throughput (package bench/pipeline): synthetic conversations through
// every stage, on the embedded broker and, with --brokers, on a real cluster beside it.
func cmdPipeline(ctx context.Context, args []string) error {
	var o pipelinebench.Options
	fs := newFlagSet("pipeline")
	brokers := fs.String("brokers", "", "a real Kafka cluster to measure next to the embedded broker (host:port,...)")
	asJSON := fs.Bool("json", false, "print the report as JSON on stdout instead of a table")
	fs.IntVar(&o.Records, "records", 10000, "synthetic conversations to push through the pipeline")
	fs.IntVar(&o.Partitions, "partitions", kafka.DefaultPartitions, "partitions of the benchmark topics")
	fs.IntVar(&o.PromptWords, "prompt-words", 120, "mean conversation length in words")
	fs.IntVar(&o.OutputTokens, "output-tokens", 32, "completion length of the instant simulated engine")
	fs.IntVar(&o.Repeat, "repeat", 1, "runs per broker, interleaved; each broker is summarised by its median run")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up on a run after this long")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole benchmark to this file")
	cli.BindKafkaSecurityFromEnv(fs, &o.Security, os.Getenv) // --kafka-tls*, --kafka-sasl-*: for the cluster --brokers names
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cli.CheckKafkaSecurity(o.Security, os.Getenv); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	o.Brokers = kafka.ParseBrokers(*brokers)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := pipelinebench.Run(ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteTable(os.Stdout)
}
