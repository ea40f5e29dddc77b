package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	pipelinebench "github.com/draftflow/draftflow/bench/pipeline"
	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/kafka"
)

// cmdBenchPipeline is `draftflow bench pipeline` (package bench/pipeline).
func cmdBenchPipeline(ctx context.Context, args []string) error {
	var o pipelinebench.Options
	var brokers, logLevel, cpuProfile string
	var asJSON bool
	t := cli.New("bench pipeline")
	t.Add("", func(fs *flag.FlagSet) {
		fs.StringVar(&brokers, "brokers", "", "a real Kafka cluster to measure next to the embedded broker (host:port,...)")
		fs.BoolVar(&asJSON, "json", false, "print the report as JSON on stdout instead of a table")
		fs.IntVar(&o.Records, "records", 10000, "synthetic conversations to push through the pipeline")
		fs.IntVar(&o.Partitions, "partitions", kafka.DefaultPartitions, "partitions of the benchmark topics")
		fs.IntVar(&o.PromptWords, "prompt-words", 120, "mean conversation length in words")
		fs.IntVar(&o.OutputTokens, "output-tokens", 32, "completion length of the instant simulated engine")
		fs.IntVar(&o.Repeat, "repeat", 1, "runs per broker, interleaved; each broker is summarised by its median run")
		fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up on a run after this long")
		fs.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
		fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole benchmark to this file")
		registerSecurityFlags(fs, &o.Security) // --kafka-tls*, --kafka-sasl-*: for the cluster --brokers names
	})
	var level slog.Level
	t.Check(func() error {
		if err := checkSecurity(o.Security); err != nil {
			return fmt.Errorf("bench pipeline: %w", err)
		}
		if err := level.UnmarshalText([]byte(logLevel)); err != nil {
			return fmt.Errorf("bench pipeline: --log-level: %w", err)
		}
		return nil
	})
	fs, err := t.Parse(args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench pipeline: unexpected argument %q", fs.Arg(0))
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	o.Brokers = kafka.ParseBrokers(brokers)
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
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
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteTable(os.Stdout)
}
