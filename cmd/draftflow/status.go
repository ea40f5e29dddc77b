package main

import (
	"context"
	"encoding/json"
	"log/slog"

	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/sink"
	capturestage "github.com/draftflow/draftflow/stages/capture"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/status"
	"github.com/draftflow/draftflow/topics"
)

// Stages of the pipeline as status sees them, with their default consumer groups.
var (
	statusIngest   = status.Stage{Name: "ingest"}
	statusTokenize = status.Stage{Name: "tokenize", Group: tokenize.DefaultGroup, Topic: topics.TopicPrompts}
	statusGenerate = status.Stage{Name: "generate", Group: generate.DefaultGroup, Topic: topics.TopicTokenized}
	statusSink     = status.Stage{Name: "sink", Group: sink.DefaultGroup, Topic: topics.TopicGenerated}
	// statusCapture is shown once the shard-files topic exists (a sink announces shards) or a capture process
	// publishes: pipelines without capture have no such row.
	statusCapture = status.Stage{Name: capturestage.Stage, Group: capturestage.DefaultGroup, Topic: topics.TopicShardFiles, Optional: true}
)

// statusStages are the stages `draftflow status` shows, consuming as the groups given (each stage's default
// when empty), in pipeline order.
func statusStages(tokenizeGroup, generateGroup, sinkGroup, captureGroup string) []status.Stage {
	return []status.Stage{withGroup(statusTokenize, tokenizeGroup), withGroup(statusGenerate, generateGroup),
		withGroup(statusSink, sinkGroup), withGroup(statusCapture, captureGroup)}
}

// runStatusStages are the stages `draftflow run` runs in its process, as its status records name them: capture
// too when the run captures.
func runStatusStages(rc runConfig) []status.Stage {
	stages := []status.Stage{statusIngest, withGroup(statusTokenize, rc.Tokenize.Group),
		withGroup(statusGenerate, rc.Generate.Group), withGroup(statusSink, rc.Sink.Group)}
	if rc.Capture.enabled() {
		stages = append(stages, withGroup(statusCapture, rc.Capture.cfg.Group))
	}
	return stages
}

// withGroup returns st consuming as group (its default when group is empty).
func withGroup(st status.Stage, group string) status.Stage {
	if group != "" {
		st.Group = group
	}
	return st
}

// startStatus starts publishing this process's status records for stages (status.Publish) from reg, and
// returns the function that stops it after writing the last record: call it once the stages returned. It also
// names the process to the brokers by its instance (kc.ClientID, unless set), so that `draftflow status`
// lists group members by the same name as their status records.
func startStatus(ctx context.Context, kc *kafka.Config, reg prometheus.Gatherer, stages ...status.Stage) (stop func()) {
	return startStatusEvery(ctx, kc, reg, 0, stages...)
}

// startStatusEvery is startStatus publishing every interval (0: status.DefaultInterval).
func startStatusEvery(ctx context.Context, kc *kafka.Config, reg prometheus.Gatherer, interval time.Duration, stages ...status.Stage) (stop func()) {
	instance := status.DefaultInstance()
	if kc.ClientID == "" {
		kc.ClientID = "draftflow-" + instance
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	cfg := status.PublisherConfig{Kafka: *kc, Gatherer: reg, Stages: stages, Instance: instance,
		Interval: interval, Logger: kc.Logger}
	go func() {
		defer close(done)
		if err := status.Publish(pctx, cfg); err != nil {
			log := kc.Logger
			if log == nil {
				log = slog.Default()
			}
			log.Warn("status: publishing stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }
}

// cmdStatus prints the pipeline's state: per stage's consumer group its offsets, lag, rates, ETA and members;
// generate's endpoints; rejections by stage and reason; warnings.
func cmdStatus(ctx context.Context, args []string) error {
	fs := newFlagSet("status")
	var c common
	c.register(fs, "")
	watch := fs.Bool("watch", false, "refresh until interrupted (in place on a terminal; one block per refresh otherwise)")
	asJSON := fs.Bool("json", false, "print the report as JSON (with --watch: one document per line per refresh)")
	every := fs.Duration("interval", 5*time.Second, "refresh interval of --watch")
	window := fs.Duration("window", status.DefaultWindow, "how far back rates look")
	var groups struct{ tokenize, generate, sink, capture string }
	fs.StringVar(&groups.tokenize, "tokenize-group", "", "tokenize's consumer group (default "+tokenize.DefaultGroup+")")
	fs.StringVar(&groups.generate, "generate-group", "", "generate's consumer group (default "+generate.DefaultGroup+")")
	fs.StringVar(&groups.sink, "sink-group", "", "the sink's consumer group (default "+sink.DefaultGroup+")")
	fs.StringVar(&groups.capture, "capture-group", "", "the capture stage's consumer group (default "+capturestage.DefaultGroup+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	kc, _, err := c.setup(ctx)
	if err != nil {
		return err
	}
	if err := requireBrokers(kc); err != nil {
		return err
	}
	col := status.NewCollector(status.CollectorConfig{Kafka: kc, Window: *window,
		Stages: statusStages(groups.tokenize, groups.generate, groups.sink, groups.capture)})
	defer col.Close()
	return showStatus(ctx, os.Stdout, col, *watch, *asJSON, *every, isTerminal(os.Stdout))
}

// showStatus collects and prints one report, or under watch one every interval until ctx ends. On a terminal
// each refresh redraws the screen (cursor home, clear); elsewhere blocks follow each other, a blank line
// apart (JSON: one document per line).
func showStatus(ctx context.Context, w io.Writer, col *status.Collector, watch, asJSON bool, every time.Duration, tty bool) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		r, err := col.Collect(cctx)
		cancel()
		if err != nil {
			if watch && ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch {
		case asJSON && watch:
			err = json.NewEncoder(w).Encode(r)
		case asJSON:
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			err = enc.Encode(r)
		default:
			if watch && tty {
				if _, err := io.WriteString(w, "\x1b[H\x1b[2J"); err != nil {
					return err
				}
			}
			err = status.Render(w, r)
			if err == nil && watch && !tty {
				_, err = io.WriteString(w, "\n")
			}
		}
		if err != nil || !watch {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// isTerminal reports whether f is a character device (a terminal), not a file or a pipe.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
