// Package replay moves a consumer group of a stopped stage to another place on the topics it reads, as
// `draftflow replay` does: to each partition's log start (replay everything still on the topic), its end (skip
// what is there now), the first record written at or after a time, or explicit offsets. The group must have no
// live member: a running stage would commit over the reset. Moving the group that reads `tokenized` (generate's)
// generates again, so Reset then also voids the shards epoch (topics.EpochVoid): what the shards topic says the
// shards hold must not make generate skip the replayed records, whose output may go to another directory; a sink
// that starts publishes what its own shards hold anew.
package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/topics"
)

// Target is where Reset moves a group: exactly one of its fields is set.
type Target struct {
	Earliest, Latest bool
	At               time.Time
	Offsets          map[string]map[int]int64 // logical topic -> partition -> offset
}

// ParseOffsets parses "topic:partition=offset,..." (logical topic names), the value of --to-offsets.
func ParseOffsets(s string) (map[string]map[int]int64, error) {
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

// Resolve returns the group to reset and the logical topics it is reset on, from what `draftflow replay` was
// given: a stage (tokenize, generate or sink; "" for none) whose group and topic are the defaults, a group, the
// topics (empty: the stage's), and the target, whose explicit offsets add the topics they name.
func Resolve(stage, group string, topicList []string, target Target) (string, []string, error) {
	g, tops := group, slices.Clone(topicList)
	if stage != "" {
		if !slices.Contains([]string{"tokenize", "generate", "sink"}, stage) {
			return "", nil, fmt.Errorf("--stage %q: want tokenize, generate or sink", stage)
		}
		st := pipeline.StatusStage(stage, g)
		if g == "" {
			g = st.Group
		}
		if len(tops) == 0 && target.Offsets == nil {
			tops = []string{st.Topic}
		}
	}
	if g == "" {
		return "", nil, errors.New("name the group: --stage tokenize|generate|sink or --group NAME")
	}
	if target.Offsets != nil {
		for t := range target.Offsets {
			if len(topicList) > 0 && !slices.Contains(topicList, t) {
				return "", nil, fmt.Errorf("--to-offsets names topic %q, not among --topic %v", t, topicList)
			}
			if !slices.Contains(tops, t) {
				tops = append(tops, t)
			}
		}
		slices.Sort(tops)
	}
	if len(tops) == 0 {
		return "", nil, errors.New("name the topic the group reads: --topic NAME (or --stage)")
	}
	return g, tops, nil
}

// Reset resets group on each topic to target and prints to w, per partition, the committed offset before and
// after; with dryRun it only prints. It refuses a group with live members (kafka.ErrGroupActive).
func Reset(ctx context.Context, kcl *kafka.Client, w io.Writer, group string, tops []string, target Target, dryRun bool) error {
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
		case target.Earliest:
			offsets, err = adm.StartOffsets(ctx, topic)
		case target.Latest:
			offsets, err = adm.EndOffsets(ctx, topic)
		case !target.At.IsZero():
			offsets, err = adm.OffsetsForTime(ctx, topic, target.At)
		default:
			offsets = target.Offsets[topic]
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
		if err := VoidShardsEpoch(ctx, kcl); err != nil {
			return err
		}
		fmt.Fprintf(w, "voided what %s says the shards hold: generate sends every replayed record again until a sink starts and publishes its shards\n",
			kc.Topic(topics.TopicShards))
	}
	return nil
}

// VoidShardsEpoch writes a void epoch to the shards topic (topics.EpochVoid): until a sink publishes its shards
// anew, the topic says the shards hold nothing.
func VoidShardsEpoch(ctx context.Context, kcl *kafka.Client) error {
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
