package topics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// Config says how to reach Kafka and how topics are laid out. The zero value of every field but Brokers is a
// documented default.
type Config struct {
	// Brokers is the bootstrap list, host:port each.
	Brokers []string
	// Partitions is the partition count of topics this process creates (default 8). Existing topics keep theirs.
	Partitions int
	// ReplicationFactor of created topics (default 1).
	ReplicationFactor int
	// MaxMessageBytes is the largest record batch a topic accepts and a writer sends (default 8 MiB). Topics are
	// created with max.message.bytes set to it, and writers use it as BatchBytes, so a single record of tens of
	// thousands of tokens always fits.
	MaxMessageBytes int
	// ClientID identifies this process to the brokers (default "draftflow").
	ClientID string
	// Namespace, when set, prefixes every topic name ("<namespace>.prompts"), so several pipelines (or test
	// runs) can share one cluster. Stages always use the logical names; Producer, Consumer and EnsureTopics
	// apply the prefix.
	Namespace string
	// Logger receives plumbing logs (default slog.Default()).
	Logger *slog.Logger
}

// Topic returns the physical topic name of a logical one (see Namespace).
func (c Config) Topic(name string) string {
	if c.Namespace == "" {
		return name
	}
	return c.Namespace + "." + name
}

// Default values of Config.
const (
	DefaultPartitions      = 8
	DefaultMaxMessageBytes = 8 << 20
)

func (c Config) partitions() int {
	if c.Partitions > 0 {
		return c.Partitions
	}
	return DefaultPartitions
}

func (c Config) replication() int {
	if c.ReplicationFactor > 0 {
		return c.ReplicationFactor
	}
	return 1
}

func (c Config) maxMessageBytes() int {
	if c.MaxMessageBytes > 0 {
		return c.MaxMessageBytes
	}
	return DefaultMaxMessageBytes
}

func (c Config) clientID() string {
	if c.ClientID != "" {
		return c.ClientID
	}
	return "draftflow"
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// ParseBrokers splits a comma-separated broker list, falling back to the DRAFTFLOW_BROKERS environment
// variable when s is empty. It returns nil when neither is set.
func ParseBrokers(s string) []string {
	if s == "" {
		s = os.Getenv("DRAFTFLOW_BROKERS")
	}
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// EnsureTopics creates the named topics with the configured partitions, replication and max.message.bytes,
// reusing any that already exist. It waits until every topic's metadata is visible, up to ctx.
func (c Config) EnsureTopics(ctx context.Context, names ...string) error {
	if len(c.Brokers) == 0 {
		return errors.New("topics: no brokers configured")
	}
	client := c.adminClient()
	req := &kafka.CreateTopicsRequest{}
	physical := make([]string, len(names))
	for i, n := range names {
		physical[i] = c.Topic(n)
		req.Topics = append(req.Topics, kafka.TopicConfig{
			Topic:             physical[i],
			NumPartitions:     c.partitions(),
			ReplicationFactor: c.replication(),
			ConfigEntries: []kafka.ConfigEntry{
				{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(c.maxMessageBytes())},
			},
		})
	}
	var resp *kafka.CreateTopicsResponse
	var err error
	for attempt := 0; ; attempt++ {
		resp, err = client.CreateTopics(ctx, req)
		if err == nil || attempt >= 20 || ctx.Err() != nil {
			break
		}
		// The broker may still be starting (controller not elected yet); retry briefly.
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("topics: create %v on %v: %w", names, c.Brokers, err)
	}
	var existing []string
	for topic, terr := range resp.Errors {
		if terr != nil && !errors.Is(terr, kafka.TopicAlreadyExists) {
			return fmt.Errorf("topics: create %q: %w", topic, terr)
		}
		if terr != nil {
			c.logger().Debug("topic exists, reusing it", "topic", topic)
			existing = append(existing, topic)
		} else {
			c.logger().Info("topic created", "topic", topic, "partitions", c.partitions())
		}
	}
	c.checkMaxMessageBytes(ctx, client, existing)
	// Wait until metadata shows every topic with its partitions and leaders.
	for {
		meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: physical})
		if err == nil {
			ready := 0
			for _, t := range meta.Topics {
				if t.Error != nil || len(t.Partitions) == 0 {
					continue
				}
				ok := true
				for _, p := range t.Partitions {
					if p.Error != nil || p.Leader.Host == "" {
						ok = false
					}
				}
				if ok {
					ready++
				}
			}
			if ready == len(names) && c.partitionsServing(ctx, client, meta) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics: waiting for metadata of %v: %w", names, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkMaxMessageBytes warns about every existing (physical) topic whose max.message.bytes is below
// MaxMessageBytes: the broker refuses records between the two, and the stages dead-letter them. It leaves the
// topics as they are.
func (c Config) checkMaxMessageBytes(ctx context.Context, client *kafka.Client, physical []string) {
	if len(physical) == 0 {
		return
	}
	req := &kafka.DescribeConfigsRequest{}
	for _, t := range physical {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: t, ConfigNames: []string{"max.message.bytes"},
		})
	}
	resp, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		c.logger().Debug("cannot check max.message.bytes of existing topics", "topics", physical, "err", err)
		return
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			c.logger().Debug("cannot check max.message.bytes of an existing topic", "topic", r.ResourceName, "err", r.Error)
			continue
		}
		for _, e := range r.ConfigEntries {
			n, err := strconv.Atoi(e.ConfigValue)
			if e.ConfigName != "max.message.bytes" || err != nil || n >= c.maxMessageBytes() {
				continue
			}
			c.logger().Warn("existing topic accepts smaller records than configured; the broker will refuse larger ones "+
				"and they will be dead-lettered (raise the topic's max.message.bytes or lower --max-message-bytes)",
				"topic", r.ResourceName, "max_message_bytes", n, "configured_max_message_bytes", c.maxMessageBytes())
		}
	}
}

// partitionsServing reports whether every partition of the topics in meta answers ListOffsets: a new topic's
// partitions are listed with a leader a second or more before Apache Kafka serves them.
func (c Config) partitionsServing(ctx context.Context, client *kafka.Client, meta *kafka.MetadataResponse) bool {
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, t := range meta.Topics {
		for _, p := range t.Partitions {
			req.Topics[t.Name] = append(req.Topics[t.Name], kafka.FirstOffsetOf(p.ID))
		}
	}
	resp, err := client.ListOffsets(ctx, req)
	if err != nil {
		return false
	}
	for _, parts := range resp.Topics {
		for _, p := range parts {
			if p.Error != nil {
				return false
			}
		}
	}
	return true
}

// PartitionCount returns the number of partitions of an existing (logical) topic.
func (c Config) PartitionCount(ctx context.Context, topic string) (int, error) {
	client := c.adminClient()
	topic = c.Topic(topic)
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, err
	}
	for _, t := range meta.Topics {
		if t.Name == topic {
			if t.Error != nil {
				return 0, t.Error
			}
			return len(t.Partitions), nil
		}
	}
	return 0, fmt.Errorf("topics: %q not in metadata", topic)
}

// EndOffsets returns the end offset of every partition of an existing (logical) topic: the offset its next
// record will get.
func (c Config) EndOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	n, err := c.PartitionCount(ctx, topic)
	if err != nil {
		return nil, err
	}
	physical := c.Topic(topic)
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := 0; p < n; p++ {
		req.Topics[physical] = append(req.Topics[physical], kafka.LastOffsetOf(p))
	}
	client := c.adminClient()
	resp, err := client.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("topics: end offsets of %s: %w", physical, err)
	}
	out := make(map[int]int64, n)
	for _, po := range resp.Topics[physical] {
		if po.Error != nil {
			return nil, fmt.Errorf("topics: end offset of %s/%d: %w", physical, po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
	}
	if len(out) != n {
		return nil, fmt.Errorf("topics: end offsets of %s: %d of %d partitions answered", physical, len(out), n)
	}
	return out, nil
}

// StartGroupAt commits offsets (partition -> next offset to read) of a (logical) topic for a consumer group
// that has no members yet, so that its consumers start each partition there rather than at the beginning. The
// group is namespaced like ConsumerConfig.Group. The broker refuses it while the group has members.
func (c Config) StartGroupAt(ctx context.Context, group, topic string, offsets map[int]int64) error {
	physical := c.Topic(topic)
	var commits []kafka.OffsetCommit
	for p, off := range offsets {
		commits = append(commits, kafka.OffsetCommit{Partition: p, Offset: off})
	}
	client := c.adminClient()
	resp, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{
		GroupID: c.Topic(group), GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{physical: commits},
	})
	if err != nil {
		return fmt.Errorf("topics: set offsets of group %s on %s: %w", c.Topic(group), physical, err)
	}
	for _, p := range resp.Topics[physical] {
		if p.Error != nil {
			return fmt.Errorf("topics: set offset of group %s on %s/%d: %w", c.Topic(group), physical, p.Partition, p.Error)
		}
	}
	return nil
}

// adminClient returns a client for the cluster's admin and metadata requests.
func (c Config) adminClient() *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(c.Brokers...), Timeout: 30 * time.Second}
}

// DeleteGroup deletes a consumer group (namespaced like ConsumerConfig.Group) and its committed offsets. The
// broker refuses it while the group has members; a group that does not exist is not an error.
func (c Config) DeleteGroup(ctx context.Context, group string) error {
	client := c.adminClient()
	id := c.Topic(group)
	resp, err := client.DeleteGroups(ctx, &kafka.DeleteGroupsRequest{GroupIDs: []string{id}})
	if err != nil {
		return fmt.Errorf("topics: delete group %s: %w", id, err)
	}
	if err := resp.Errors[id]; err != nil && !errors.Is(err, kafka.GroupIdNotFound) {
		return fmt.Errorf("topics: delete group %s: %w", id, err)
	}
	return nil
}

// TopicConfigValue returns one config value of a (logical) topic (for example max.message.bytes), as the broker reports it.
func (c Config) TopicConfigValue(ctx context.Context, topic, name string) (string, error) {
	topic = c.Topic(topic)
	client := c.adminClient()
	resp, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{name},
	}}})
	if err != nil {
		return "", err
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			return "", r.Error
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == name {
				return e.ConfigValue, nil
			}
		}
	}
	return "", fmt.Errorf("topics: %s has no config %q", topic, name)
}

// dialer returns a kafka-go dialer carrying the client id.
func (c Config) dialer() *kafka.Dialer {
	return &kafka.Dialer{ClientID: c.clientID(), Timeout: 10 * time.Second, DualStack: true}
}
