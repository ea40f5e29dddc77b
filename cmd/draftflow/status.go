package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/sink"
	capturestage "github.com/draftflow/draftflow/stages/capture"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/status"
)

// statusOptions are `draftflow status`'s own settings.
type statusOptions struct {
	watch, asJSON bool
	every, window time.Duration
	groups        struct{ tokenize, generate, sink, capture string }
}

// statusFlags is the `draftflow status` settings: the shared ones, its own, and the stages' consumer groups
// (the stages' group keys: tokenize.group is --tokenize-group).
func statusFlags(c *common, o *statusOptions) *cli.Table {
	o.every, o.window = 5*time.Second, status.DefaultWindow
	t := cli.New("status")
	t.Add("", func(fs *flag.FlagSet) { c.register(fs, "") })
	t.Add("status", func(fs *flag.FlagSet) {
		fs.BoolVar(&o.watch, "watch", o.watch, "refresh until interrupted (in place on a terminal; one block per refresh otherwise)")
		fs.BoolVar(&o.asJSON, "json", o.asJSON, "print the report as JSON (with --watch: one document per line per refresh)")
		fs.DurationVar(&o.every, "interval", o.every, "refresh interval of --watch")
		fs.DurationVar(&o.window, "window", o.window, "how far back rates look")
	})
	group := func(stage string, g *string, def string) {
		t.Add(stage, func(fs *flag.FlagSet) {
			fs.StringVar(g, "group", "", stage+"'s consumer group (default "+def+")")
		}, cli.Rename("group", stage+"-group"))
	}
	group("tokenize", &o.groups.tokenize, tokenize.DefaultGroup)
	group("generate", &o.groups.generate, generate.DefaultGroup)
	group("sink", &o.groups.sink, sink.DefaultGroup)
	group(capturestage.Stage, &o.groups.capture, capturestage.DefaultGroup)
	return t
}

// cmdStatus prints the pipeline's state: per stage's consumer group its offsets, lag, rates, ETA and members;
// generate's endpoints; rejections by stage and reason; warnings.
func cmdStatus(ctx context.Context, args []string) error {
	var c common
	var o statusOptions
	fs, eff, err := load(statusFlags(&c, &o), args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	c.effective = eff
	p, err := c.setup(ctx)
	if err != nil {
		return err
	}
	defer p.close()
	if err := p.connect(); err != nil {
		return err
	}
	col := status.NewCollector(status.CollectorConfig{Client: p.kcl, Window: o.window,
		Stages: statusStages(o.groups.tokenize, o.groups.generate, o.groups.sink, o.groups.capture)})
	return showStatus(ctx, os.Stdout, col, o.watch, o.asJSON, o.every, isTerminal(os.Stdout))
}

// statusStages are the stages `draftflow status` shows, consuming as the groups given (each stage's default
// when empty), in pipeline order.
func statusStages(tokenizeGroup, generateGroup, sinkGroup, captureGroup string) []status.Stage {
	return []status.Stage{pipeline.StatusStage("tokenize", tokenizeGroup), pipeline.StatusStage("generate", generateGroup),
		pipeline.StatusStage("sink", sinkGroup), pipeline.StatusStage(capturestage.Stage, captureGroup)}
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
