package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/replay"
)

// replayOptions are `draftflow replay`'s own settings.
type replayOptions struct {
	stage, group, toTime, toOffsets string
	topics                          stringList
	toEarliest, toLatest, dryRun    bool
}

// replayFlags is the `draftflow replay` settings: the shared ones and its own.
func replayFlags(c *common, o *replayOptions) *cli.Table {
	t := cli.New("replay")
	t.Add("", func(fs *flag.FlagSet) { c.register(fs, "") })
	t.Add("replay", func(fs *flag.FlagSet) {
		fs.StringVar(&o.stage, "stage", "", "the stage whose consumer group to reset: tokenize (reads prompts), generate (tokenized) or sink (generated)")
		fs.StringVar(&o.group, "group", "", "consumer group to reset (default: the stage's; namespaced like the stages' groups)")
		fs.Var(&o.topics, "topic", "logical topic(s) the group reads (default: the stage's; repeatable)")
		fs.BoolVar(&o.toEarliest, "to-earliest", false, "replay everything still on the topic (each partition's log start)")
		fs.BoolVar(&o.toLatest, "to-latest", false, "skip everything on the topic now (each partition's end)")
		fs.StringVar(&o.toTime, "to-time", "", "replay the records written at or after this RFC 3339 time")
		fs.StringVar(&o.toOffsets, "to-offsets", "", "explicit offsets: topic:partition=offset,... (partitions not named keep theirs)")
		fs.BoolVar(&o.dryRun, "dry-run", false, "print the offsets the group would get, change nothing")
	})
	return t
}

func cmdReplay(ctx context.Context, args []string) error {
	var c common
	var o replayOptions
	fs, eff, err := load(replayFlags(&c, &o), args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.effective = eff
	var target replay.Target
	chosen := 0
	if o.toEarliest {
		target.Earliest, chosen = true, chosen+1
	}
	if o.toLatest {
		target.Latest, chosen = true, chosen+1
	}
	if o.toTime != "" {
		t, err := time.Parse(time.RFC3339, o.toTime)
		if err != nil {
			return fmt.Errorf("--to-time %q: want an RFC 3339 time such as 2026-12-03T18:00:00Z", o.toTime)
		}
		target.At, chosen = t, chosen+1
	}
	if o.toOffsets != "" {
		offs, err := replay.ParseOffsets(o.toOffsets)
		if err != nil {
			return err
		}
		target.Offsets, chosen = offs, chosen+1
	}
	if chosen != 1 {
		return errors.New("say where to move the group: exactly one of --to-earliest, --to-latest, --to-time, --to-offsets")
	}
	g, tops, err := replay.Resolve(o.stage, o.group, o.topics, target)
	if err != nil {
		return err
	}
	p, err := c.setup(ctx)
	if err != nil {
		return err
	}
	defer p.close()
	if err := p.connect(); err != nil {
		return err
	}
	p.log.Debug("replay", "group", p.kc.Topic(g), "topics", tops)
	return replay.Reset(ctx, p.kcl, os.Stdout, g, tops, target, o.dryRun)
}
