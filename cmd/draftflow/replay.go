package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/topics"
)

// replayTarget is where `draftflow replay` moves a group: exactly one of its fields is set.
type replayTarget struct {
	earliest, latest bool
	at               time.Time
	offsets          map[string]map[int]int64 // logical topic -> partition -> offset
}

// parseOffsets parses "topic:partition=offset,..." (logical topic names).
func parseOffsets(s string) (map[string]map[int]int64, error) {
	out := map[string]map[int]int64{}
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		tp, off, ok1 := strings.Cut(item, "=")
		topic, part, ok2 := strings.Cut(tp, ":")
		p, perr := strconv.Atoi(part)
		o, oerr := strconv.ParseInt(off, 10, 64)
		if !ok1 || !ok2 || topic == "" || perr != nil || oerr != nil || p < 0 || o < 0 {
			return nil, fmt.Errorf("--to-offsets: %q is not topic:partition=offset", item)
		}
		if out[topic] == nil {
			out[topic] = map[int]int64{}
		}
		out[topic][p] = o
	}
	if len(out) == 0 {
		return nil, errors.New("--to-offsets: no offsets given")
	}
	return out, nil
}

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
	stage, group, toTime, toOffsets, topicList := o.stage, o.group, o.toTime, o.toOffsets, o.topics
	toEarliest, toLatest, dryRun := o.toEarliest, o.toLatest, o.dryRun
	var target replayTarget
	chosen := 0
	if toEarliest {
		target.earliest, chosen = true, chosen+1
	}
	if toLatest {
		target.latest, chosen = true, chosen+1
	}
	if toTime != "" {
		t, err := time.Parse(time.RFC3339, toTime)
		if err != nil {
			return fmt.Errorf("--to-time %q: want an RFC 3339 time such as 2026-12-03T18:00:00Z", toTime)
		}
		target.at, chosen = t, chosen+1
	}
	if toOffsets != "" {
		offs, err := parseOffsets(toOffsets)
		if err != nil {
			return err
		}
		target.offsets, chosen = offs, chosen+1
	}
	if chosen != 1 {
		return errors.New("say where to move the group: exactly one of --to-earliest, --to-latest, --to-time, --to-offsets")
	}
	g, tops := group, []string(topicList)
	if stage != "" {
		if !slices.Contains([]string{"tokenize", "generate", "sink"}, stage) {
			return fmt.Errorf("--stage %q: want tokenize, generate or sink", stage)
		}
		st := pipeline.StatusStage(stage, g)
		if g == "" {
			g = st.Group
		}
		if len(tops) == 0 && target.offsets == nil {
			tops = []string{st.Topic}
		}
	}
	if g == "" {
		return errors.New("name the group: --stage tokenize|generate|sink or --group NAME")
	}
	if target.offsets != nil {
		for t := range target.offsets {
			if len(topicList) > 0 && !slices.Contains(topicList, t) {
				return fmt.Errorf("--to-offsets names topic %q, not among --topic %v", t, []string(topicList))
			}
			if !slices.Contains(tops, t) {
				tops = append(tops, t)
			}
		}
		slices.Sort(tops)
	}
	if len(tops) == 0 {
		return errors.New("name the topic the group reads: --topic NAME (or --stage)")
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
	return replay(ctx, p.kcl, os.Stdout, g, tops, target, dryRun)
}

// replay resets group on each topic to target and prints, per partition, the committed offset before and after.
func replay(ctx context.Context, kcl *kafka.Client, w io.Writer, group string, tops []string, target replayTarget, dryRun bool) error {
	kc, adm := kcl.Config(), kcl.Admin()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	g, err := adm.DescribeGroup(ctx, group)
	if err != nil {
		return err
	}
	if len(g.Members) > 0 {
		return fmt.Errorf("consumer group %s is in use (state %s, %d live members: %s): stop the stage's processes, then replay: %w",
			kc.Topic(group), g.State, len(g.Members), g.MemberList(), kafka.ErrGroupActive)
	}
	for _, topic := range tops {
		var offsets map[int]int64
		switch {
		case target.earliest:
			offsets, err = adm.StartOffsets(ctx, topic)
		case target.latest:
			offsets, err = adm.EndOffsets(ctx, topic)
		case !target.at.IsZero():
			offsets, err = adm.OffsetsForTime(ctx, topic, target.at)
		default:
			offsets = target.offsets[topic]
		}
		if err != nil {
			return err
		}
		before, err := adm.CommittedOffsets(ctx, group, topic)
		if err != nil {
			return err
		}
		parts := slices.Sorted(maps.Keys(offsets))
		verb := "reset"
		if dryRun {
			verb = "would reset"
		}
		for _, p := range parts {
			was := "none"
			if off, ok := before[p]; ok {
				was = strconv.FormatInt(off, 10)
			}
			fmt.Fprintf(w, "%s group %s on %s/%d: %s -> %d\n", verb, kc.Topic(group), kc.Topic(topic), p, was, offsets[p])
		}
		if dryRun {
			continue
		}
		if err := adm.ResetGroup(ctx, group, topic, offsets); err != nil {
			return err
		}
	}
	if !dryRun && slices.Contains(tops, topics.TopicTokenized) {
		// Replaying generate is generating again: what the shards topic says the shards hold must not make
		// generate skip the replayed records (the new output may be another directory). A sink that starts
		// publishes what its own shards hold anew.
		if err := voidShardsEpoch(ctx, kcl); err != nil {
			return err
		}
		fmt.Fprintf(w, "voided what %s says the shards hold: generate sends every replayed record again until a sink starts and publishes its shards\n",
			kc.Topic(topics.TopicShards))
	}
	return nil
}

// voidShardsEpoch writes a void epoch to the shards topic (topics.EpochVoid).
func voidShardsEpoch(ctx context.Context, kcl *kafka.Client) error {
	adm := kcl.Admin()
	if err := adm.EnsureCompactedTopic(ctx, topics.TopicShards); err != nil {
		return err
	}
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	value, err := topics.Marshal(&topics.ShardsEpoch{Epoch: hex.EncodeToString(b[:]), State: topics.EpochVoid, Time: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("void the shards topic's epoch: %w", err)
	}
	p := kcl.NewProducer(topics.TopicShards, kafka.ProducerConfig{})
	err = p.SendSync(ctx, topics.ShardsEpochKey, value)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("void the shards topic's epoch: %w", err)
	}
	return nil
}
