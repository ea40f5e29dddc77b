package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// Admin sends a Client's admin requests: it creates and deletes topics, reads partition counts, offsets, topic
// configs and ids, describes, resets and deletes consumer groups, and reports what retention may cost a group
// (RetentionRisk). Topic and group names are logical: the Client's Config namespaces them. Client.Admin returns
// it; it uses the Client's connections and is safe for concurrent use.
type Admin struct {
	cfg Config
	cl  *Client
}

// EnsureTopics creates the named topics with the configured partitions, replication and max.message.bytes,
// reusing any that already exist. It waits until every topic's metadata is visible, up to ctx.
func (a *Admin) EnsureTopics(ctx context.Context, names ...string) error {
	return a.ensureTopics(ctx, names, a.cfg.partitions(), []kafkago.ConfigEntry{
		{ConfigName: "retention.ms", ConfigValue: strconv.FormatInt(a.cfg.retentionMs(), 10)},
		{ConfigName: "retention.bytes", ConfigValue: "-1"},
	}, a.cfg.retentionText())
}

// EnsureCompactedTopic creates the named topic with one partition, compaction (cleanup.policy=compact: the
// latest record of each key is kept, whatever Retention says) and the configured replication and
// max.message.bytes, reusing it if it exists, and waits until its metadata is visible. One partition keeps
// every record in the order it was written (topics.TopicShards relies on it).
func (a *Admin) EnsureCompactedTopic(ctx context.Context, name string) error {
	return a.ensureTopics(ctx, []string{name}, 1, []kafkago.ConfigEntry{
		{ConfigName: "cleanup.policy", ConfigValue: "compact"},
	}, "compacted")
}

// ensureTopics is EnsureTopics with the partition count and the config entries (besides max.message.bytes) of
// the topics it creates; retention describes them in the log.
func (a *Admin) ensureTopics(ctx context.Context, names []string, partitions int, entries []kafkago.ConfigEntry, retention string) error {
	client, err := a.cl.adminClient()
	if err != nil {
		return err
	}
	req := &kafkago.CreateTopicsRequest{}
	physical := make([]string, len(names))
	for i, n := range names {
		physical[i] = a.cfg.Topic(n)
		req.Topics = append(req.Topics, kafkago.TopicConfig{
			Topic:             physical[i],
			NumPartitions:     partitions,
			ReplicationFactor: a.cfg.replication(),
			ConfigEntries: append([]kafkago.ConfigEntry{
				{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(a.cfg.maxMessageBytes())},
			}, entries...),
		})
	}
	var resp *kafkago.CreateTopicsResponse
	for attempt := 0; ; attempt++ {
		resp, err = client.CreateTopics(ctx, req)
		if err = a.cl.explain(ctx, err); err == nil || attempt >= 20 || ctx.Err() != nil || IsAuthError(err) {
			break
		}
		// The broker may still be starting (controller not elected yet); retry briefly.
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("kafka: create %v on %v: %w", names, a.cfg.Brokers, err)
	}
	var existing []string
	for topic, terr := range resp.Errors {
		if terr != nil && !errors.Is(terr, kafkago.TopicAlreadyExists) {
			return fmt.Errorf("kafka: create %q: %w", topic, terr)
		}
		if terr != nil {
			a.cfg.logger().Debug("topic exists, reusing it", "topic", topic)
			existing = append(existing, topic)
		} else {
			a.cfg.logger().Info("topic created", "topic", topic, "partitions", partitions, "retention", retention)
		}
	}
	a.checkMaxMessageBytes(ctx, client, existing)
	// Wait until metadata shows every topic with its partitions and leaders.
	for {
		meta, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: physical})
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
			if ready == len(names) && a.partitionsServing(ctx, client, meta) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: waiting for metadata of %v: %w", names, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkMaxMessageBytes warns about every existing (physical) topic whose max.message.bytes is below
// MaxMessageBytes: the broker refuses records between the two, and the stages dead-letter them. It leaves the
// topics as they are.
func (a *Admin) checkMaxMessageBytes(ctx context.Context, client *kafkago.Client, physical []string) {
	if len(physical) == 0 {
		return
	}
	req := &kafkago.DescribeConfigsRequest{}
	for _, t := range physical {
		req.Resources = append(req.Resources, kafkago.DescribeConfigRequestResource{
			ResourceType: kafkago.ResourceTypeTopic, ResourceName: t, ConfigNames: []string{"max.message.bytes"},
		})
	}
	resp, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		a.cfg.logger().Debug("cannot check max.message.bytes of existing topics", "topics", physical, "err", err)
		return
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			a.cfg.logger().Debug("cannot check max.message.bytes of an existing topic", "topic", r.ResourceName, "err", r.Error)
			continue
		}
		for _, e := range r.ConfigEntries {
			n, err := strconv.Atoi(e.ConfigValue)
			if e.ConfigName != "max.message.bytes" || err != nil || n >= a.cfg.maxMessageBytes() {
				continue
			}
			a.cfg.logger().Warn("existing topic accepts smaller records than configured; the broker will refuse larger ones "+
				"and they will be dead-lettered (raise the topic's max.message.bytes or lower --max-message-bytes)",
				"topic", r.ResourceName, "max_message_bytes", n, "configured_max_message_bytes", a.cfg.maxMessageBytes())
		}
	}
}

// partitionsServing reports whether every partition of the topics in meta answers ListOffsets: a new topic's
// partitions are listed with a leader a second or more before Apache Kafka serves them.
func (a *Admin) partitionsServing(ctx context.Context, client *kafkago.Client, meta *kafkago.MetadataResponse) bool {
	req := &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{}}
	for _, t := range meta.Topics {
		for _, p := range t.Partitions {
			req.Topics[t.Name] = append(req.Topics[t.Name], kafkago.FirstOffsetOf(p.ID))
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
func (a *Admin) PartitionCount(ctx context.Context, topic string) (int, error) {
	client, err := a.cl.adminClient()
	if err != nil {
		return 0, err
	}
	topic = a.cfg.Topic(topic)
	meta, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("kafka: metadata of %s: %w", topic, a.cl.explain(ctx, err))
	}
	for _, t := range meta.Topics {
		if t.Name == topic {
			if t.Error != nil {
				return 0, t.Error
			}
			return len(t.Partitions), nil
		}
	}
	return 0, fmt.Errorf("kafka: %q not in metadata", topic)
}

// EndOffsets returns the end offset of every partition of an existing (logical) topic: the offset its next
// record will get.
func (a *Admin) EndOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	n, err := a.PartitionCount(ctx, topic)
	if err != nil {
		return nil, err
	}
	physical := a.cfg.Topic(topic)
	req := &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{}}
	for p := 0; p < n; p++ {
		req.Topics[physical] = append(req.Topics[physical], kafkago.LastOffsetOf(p))
	}
	client, err := a.cl.adminClient()
	if err != nil {
		return nil, err
	}
	resp, err := client.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("kafka: end offsets of %s: %w", physical, a.cl.explain(ctx, err))
	}
	out := make(map[int]int64, n)
	for _, po := range resp.Topics[physical] {
		if po.Error != nil {
			return nil, fmt.Errorf("kafka: end offset of %s/%d: %w", physical, po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
	}
	if len(out) != n {
		return nil, fmt.Errorf("kafka: end offsets of %s: %d of %d partitions answered", physical, len(out), n)
	}
	return out, nil
}

// StartGroupAt commits offsets (partition -> next offset to read) of a (logical) topic for a consumer group
// that has no members yet, so that its consumers start each partition there rather than at the beginning. The
// group is namespaced like ConsumerConfig.Group. The broker refuses it while the group has members.
func (a *Admin) StartGroupAt(ctx context.Context, group, topic string, offsets map[int]int64) error {
	physical := a.cfg.Topic(topic)
	var commits []kafkago.OffsetCommit
	for p, off := range offsets {
		commits = append(commits, kafkago.OffsetCommit{Partition: p, Offset: off})
	}
	client, err := a.cl.adminClient()
	if err != nil {
		return err
	}
	resp, err := client.OffsetCommit(ctx, &kafkago.OffsetCommitRequest{
		GroupID: a.cfg.Topic(group), GenerationID: -1, Topics: map[string][]kafkago.OffsetCommit{physical: commits},
	})
	if err != nil {
		return fmt.Errorf("kafka: set offsets of group %s on %s: %w", a.cfg.Topic(group), physical, a.cl.explain(ctx, err))
	}
	for _, p := range resp.Topics[physical] {
		if p.Error != nil {
			return fmt.Errorf("kafka: set offset of group %s on %s/%d: %w", a.cfg.Topic(group), physical, p.Partition, p.Error)
		}
	}
	return nil
}

// DeleteGroup deletes a consumer group (namespaced like ConsumerConfig.Group) and its committed offsets. The
// broker refuses it while the group has members; a group that does not exist is not an error.
func (a *Admin) DeleteGroup(ctx context.Context, group string) error {
	client, err := a.cl.adminClient()
	if err != nil {
		return err
	}
	id := a.cfg.Topic(group)
	resp, err := client.DeleteGroups(ctx, &kafkago.DeleteGroupsRequest{GroupIDs: []string{id}})
	if err != nil {
		return fmt.Errorf("kafka: delete group %s: %w", id, a.cl.explain(ctx, err))
	}
	if err := resp.Errors[id]; err != nil && !errors.Is(err, kafkago.GroupIdNotFound) {
		return fmt.Errorf("kafka: delete group %s: %w", id, err)
	}
	return nil
}

// TopicConfigValue returns one config value of a (logical) topic (for example max.message.bytes), as the broker reports it.
func (a *Admin) TopicConfigValue(ctx context.Context, topic, name string) (string, error) {
	topic = a.cfg.Topic(topic)
	client, err := a.cl.adminClient()
	if err != nil {
		return "", err
	}
	resp, err := client.DescribeConfigs(ctx, &kafkago.DescribeConfigsRequest{Resources: []kafkago.DescribeConfigRequestResource{{
		ResourceType: kafkago.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{name},
	}}})
	if err != nil {
		return "", fmt.Errorf("kafka: config %s of %s: %w", name, topic, a.cl.explain(ctx, err))
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
	return "", fmt.Errorf("kafka: %s has no config %q", topic, name)
}

// CommittedOffsets returns a consumer group's committed offsets (partition -> next offset to read) on a
// (logical) topic; the group is namespaced like ConsumerConfig.Group. A partition without a commit is absent;
// a group that does not exist has none.
func (a *Admin) CommittedOffsets(ctx context.Context, group, topic string) (map[int]int64, error) {
	n, err := a.PartitionCount(ctx, topic)
	if err != nil {
		return nil, err
	}
	physical := a.cfg.Topic(topic)
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	client, err := a.cl.adminClient()
	if err != nil {
		return nil, err
	}
	resp, err := client.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: a.cfg.Topic(group),
		Topics: map[string][]int{physical: parts}})
	if err != nil {
		return nil, fmt.Errorf("kafka: committed offsets of group %s on %s: %w", a.cfg.Topic(group), physical, a.cl.explain(ctx, err))
	}
	if errors.Is(resp.Error, kafkago.GroupIdNotFound) {
		return map[int]int64{}, nil // a group that never committed (the embedded broker says so; Apache Kafka answers with no offsets)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("kafka: committed offsets of group %s on %s: %w", a.cfg.Topic(group), physical, resp.Error)
	}
	out := map[int]int64{}
	for _, p := range resp.Topics[physical] {
		if p.Error != nil {
			return nil, fmt.Errorf("kafka: committed offset of group %s on %s/%d: %w", a.cfg.Topic(group), physical, p.Partition, p.Error)
		}
		if p.CommittedOffset >= 0 {
			out[p.Partition] = p.CommittedOffset
		}
	}
	return out, nil
}

// Groups returns the ids of the consumer groups the cluster knows (physical names, namespace included).
func (a *Admin) Groups(ctx context.Context) ([]string, error) {
	client, err := a.cl.adminClient()
	if err != nil {
		return nil, err
	}
	resp, err := client.ListGroups(ctx, &kafkago.ListGroupsRequest{})
	if err != nil {
		return nil, fmt.Errorf("kafka: list groups: %w", a.cl.explain(ctx, err))
	}
	var out []string
	for _, g := range resp.Groups {
		out = append(out, g.GroupID)
	}
	return out, resp.Error
}

// DeleteTopics deletes (logical) topics and everything on them.
func (a *Admin) DeleteTopics(ctx context.Context, names ...string) error {
	physical := make([]string, len(names))
	for i, n := range names {
		physical[i] = a.cfg.Topic(n)
	}
	client, err := a.cl.adminClient()
	if err != nil {
		return err
	}
	resp, err := client.DeleteTopics(ctx, &kafkago.DeleteTopicsRequest{Topics: physical})
	if err != nil {
		return fmt.Errorf("kafka: delete topics %v: %w", physical, a.cl.explain(ctx, err))
	}
	for _, e := range resp.Errors {
		err = errors.Join(err, e)
	}
	return err
}

// PartitionOf returns the partition, of a topic with n partitions, that a Producer writes a record keyed key to.
func PartitionOf(key string, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return (&kafkago.Hash{}).Balance(kafkago.Message{Key: []byte(key)}, parts...)
}
