package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// GroupMember is one member of a consumer group as the coordinator describes it.
type GroupMember struct {
	// ID is the member id the coordinator gave it.
	ID string `json:"id"`
	// ClientID is the client id the member connected with; Host the address it connected from.
	ClientID string `json:"client_id"`
	Host     string `json:"host"`
	// Partitions are the partitions assigned to it, per logical topic.
	Partitions map[string][]int `json:"partitions,omitempty"`
}

// GroupDescription is a consumer group's state and members.
type GroupDescription struct {
	// Group is the logical group id (namespace removed).
	Group string `json:"group"`
	// State is the coordinator's word for it: Stable, PreparingRebalance, CompletingRebalance, Empty or Dead.
	State string `json:"state"`
	// Members of the current generation, by member id.
	Members []GroupMember `json:"members"`
}

// DescribeGroup returns the state and members of a consumer group (namespaced like ConsumerConfig.Group). A
// group the cluster does not know is described as Dead with no members, as Kafka itself does.
func (c Config) DescribeGroup(ctx context.Context, group string) (GroupDescription, error) {
	id := c.Topic(group)
	resp, err := c.adminClient().DescribeGroups(ctx, &kafkago.DescribeGroupsRequest{GroupIDs: []string{id}})
	if err != nil {
		return GroupDescription{}, fmt.Errorf("kafka: describe group %s: %w", id, err)
	}
	out := GroupDescription{Group: group, State: "Dead"}
	for _, g := range resp.Groups {
		if g.GroupID != id {
			continue
		}
		if g.Error != nil && !errors.Is(g.Error, kafkago.GroupIdNotFound) {
			return out, fmt.Errorf("kafka: describe group %s: %w", id, g.Error)
		}
		if g.GroupState != "" {
			out.State = g.GroupState
		}
		for _, m := range g.Members {
			gm := GroupMember{ID: m.MemberID, ClientID: m.ClientID, Host: strings.TrimPrefix(m.ClientHost, "/")}
			for _, t := range m.MemberAssignments.Topics {
				if gm.Partitions == nil {
					gm.Partitions = map[string][]int{}
				}
				parts := slices.Clone(t.Partitions)
				slices.Sort(parts)
				gm.Partitions[c.logical(t.Topic)] = parts
			}
			out.Members = append(out.Members, gm)
		}
	}
	slices.SortFunc(out.Members, func(a, b GroupMember) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// logical strips the namespace from a physical topic or group name.
func (c Config) logical(physical string) string {
	if c.Namespace == "" {
		return physical
	}
	return strings.TrimPrefix(physical, c.Namespace+".")
}

// StartOffsets returns the first offset still on the log of every partition of an existing (logical) topic:
// the end offset of an empty partition, more than 0 once retention deleted records.
func (c Config) StartOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	n, err := c.PartitionCount(ctx, topic)
	if err != nil {
		return nil, err
	}
	physical := c.Topic(topic)
	req := &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{}}
	for p := 0; p < n; p++ {
		req.Topics[physical] = append(req.Topics[physical], kafkago.FirstOffsetOf(p))
	}
	resp, err := c.adminClient().ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("kafka: start offsets of %s: %w", physical, err)
	}
	out := make(map[int]int64, n)
	for _, po := range resp.Topics[physical] {
		if po.Error != nil {
			return nil, fmt.Errorf("kafka: start offset of %s/%d: %w", physical, po.Partition, po.Error)
		}
		out[po.Partition] = po.FirstOffset
	}
	if len(out) != n {
		return nil, fmt.Errorf("kafka: start offsets of %s: %d of %d partitions answered", physical, len(out), n)
	}
	return out, nil
}

// ReadPartition reads the records of one partition of a (logical) topic with offsets in [from, to), outside
// any consumer group (nothing is committed), and calls fn for each in order. It returns fn's first error, or
// an error when ctx ends before the record at to-1 was read. Records deleted by retention or compaction are
// skipped.
func (c Config) ReadPartition(ctx context.Context, topic string, partition int, from, to int64, fn func(Message) error) error {
	if from >= to {
		return nil
	}
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers:   c.Brokers,
		Topic:     c.Topic(topic),
		Partition: partition,
		Dialer:    c.dialer(),
		MinBytes:  1,
		MaxBytes:  c.maxMessageBytes() * 2,
		MaxWait:   100 * time.Millisecond,
	})
	defer r.Close()
	if err := r.SetOffset(from); err != nil {
		return fmt.Errorf("kafka: read %s/%d from %d: %w", c.Topic(topic), partition, from, err)
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return fmt.Errorf("kafka: read %s/%d at %d of [%d, %d): %w", c.Topic(topic), partition, r.Offset(), from, to, err)
		}
		if m.Offset >= to {
			return nil
		}
		if err := fn(Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Time: m.Time}); err != nil {
			return err
		}
		if m.Offset >= to-1 {
			return nil
		}
	}
}
