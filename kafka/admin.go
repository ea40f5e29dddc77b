package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Admin sends a Client's admin requests: it creates and deletes topics, reads partition counts, offsets, topic
// configs and ids, describes, resets and deletes consumer groups, and reports what retention may cost a group
// (RetentionRisk). Topic and group names are logical: the Client's Config namespaces them. Client.Admin returns
// it; it uses the Client's connections and is safe for concurrent use.
type Admin struct {
	cfg Config
	cl  *Client
}

// kadm returns franz-go's admin client over the Client's admin connections.
func (a *Admin) kadm(ctx context.Context) (*kadm.Client, error) {
	cl, err := a.cl.franzAdmin(ctx)
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(cl), nil
}

// EnsureTopics creates the named topics with the configured partitions, replication and max.message.bytes,
// reusing any that already exist. It waits until every topic's metadata is visible, up to ctx.
func (a *Admin) EnsureTopics(ctx context.Context, names ...string) error {
	return a.ensureTopics(ctx, names, a.cfg.partitions(), map[string]*string{
		"retention.ms":    kadm.StringPtr(strconv.FormatInt(a.cfg.retentionMs(), 10)),
		"retention.bytes": kadm.StringPtr("-1"),
	}, a.cfg.retentionText())
}

// EnsureCompactedTopic creates the named topic with one partition, compaction (cleanup.policy=compact: the
// latest record of each key is kept, whatever Retention says) and the configured replication and
// max.message.bytes, reusing it if it exists, and waits until its metadata is visible. One partition keeps
// every record in the order it was written (the shards topic relies on it).
func (a *Admin) EnsureCompactedTopic(ctx context.Context, name string) error {
	return a.ensureTopics(ctx, []string{name}, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "compacted")
}

// ensureTopics is EnsureTopics with the partition count and the configs (besides max.message.bytes) of the
// topics it creates; retention describes them in the log.
func (a *Admin) ensureTopics(ctx context.Context, names []string, partitions int, configs map[string]*string, retention string) error {
	adm, err := a.kadm(ctx)
	if err != nil {
		return fmt.Errorf("kafka: create %v on %v: %w", names, a.cfg.Brokers, err)
	}
	configs["max.message.bytes"] = kadm.StringPtr(strconv.Itoa(a.cfg.maxMessageBytes()))
	physical := make([]string, len(names))
	for i, n := range names {
		physical[i] = a.cfg.Topic(n)
	}
	var resp kadm.CreateTopicResponses
	for attempt := 0; ; attempt++ {
		resp, err = adm.CreateTopics(ctx, int32(partitions), int16(a.cfg.replication()), configs, physical...)
		if err == nil {
			err = retriableCreate(resp)
		}
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
	for _, topic := range physical {
		r, ok := resp[topic]
		switch {
		case !ok:
			return fmt.Errorf("kafka: create %q: no answer", topic)
		case errors.Is(r.Err, kerr.TopicAlreadyExists):
			a.cfg.logger().Debug("topic exists, reusing it", "topic", topic)
			existing = append(existing, topic)
		case r.Err != nil:
			return fmt.Errorf("kafka: create %q: %w", topic, a.cl.explain(ctx, r.Err))
		default:
			a.cfg.logger().Info("topic created", "topic", topic, "partitions", partitions, "retention", retention)
		}
	}
	a.checkMaxMessageBytes(ctx, adm, existing)
	// Wait until metadata shows every topic with its partitions and leaders, and every partition answers.
	for !a.serving(ctx, adm, physical) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: waiting for metadata of %v: %w", names, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// retriableCreate returns the first error of a topic creation that a retry may fix (the controller not elected
// yet, the cluster still starting).
func retriableCreate(resp kadm.CreateTopicResponses) error {
	for _, r := range resp {
		if r.Err != nil && kerr.IsRetriable(r.Err) {
			return r.Err
		}
	}
	return nil
}

// serving reports whether the metadata shows every (physical) topic with its partitions, each with a leader, and
// every partition answers ListOffsets: a new topic's partitions are listed with a leader a second or more before
// Apache Kafka serves them.
func (a *Admin) serving(ctx context.Context, adm *kadm.Client, physical []string) bool {
	meta, err := adm.Metadata(ctx, physical...)
	if err != nil {
		return false
	}
	for _, t := range physical {
		td, ok := meta.Topics[t]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			return false
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
	}
	offs, err := adm.ListStartOffsets(ctx, physical...)
	return err == nil && offs.Error() == nil
}

// checkMaxMessageBytes warns about every existing (physical) topic whose max.message.bytes is below
// MaxMessageBytes: the broker refuses records between the two, and the stages dead-letter them. It leaves the
// topics as they are.
func (a *Admin) checkMaxMessageBytes(ctx context.Context, adm *kadm.Client, physical []string) {
	if len(physical) == 0 {
		return
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, physical...)
	if err != nil {
		a.cfg.logger().Debug("cannot check max.message.bytes of existing topics", "topics", physical, "err", err)
		return
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			a.cfg.logger().Debug("cannot check max.message.bytes of an existing topic", "topic", rc.Name, "err", rc.Err)
			continue
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			if n, err := strconv.Atoi(*c.Value); err == nil && n < a.cfg.maxMessageBytes() {
				a.cfg.logger().Warn("existing topic accepts smaller records than configured; the broker will refuse larger ones "+
					"and they will be dead-lettered (raise the topic's max.message.bytes or lower --max-message-bytes)",
					"topic", rc.Name, "max_message_bytes", n, "configured_max_message_bytes", a.cfg.maxMessageBytes())
			}
		}
	}
}

// PartitionCount returns the number of partitions of an existing (logical) topic.
func (a *Admin) PartitionCount(ctx context.Context, topic string) (int, error) {
	topic = a.cfg.Topic(topic)
	adm, err := a.kadm(ctx)
	if err != nil {
		return 0, fmt.Errorf("kafka: metadata of %s: %w", topic, err)
	}
	meta, err := adm.Metadata(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka: metadata of %s: %w", topic, a.cl.explain(ctx, err))
	}
	td, ok := meta.Topics[topic]
	switch {
	case !ok:
		return 0, fmt.Errorf("kafka: %q not in metadata", topic)
	case td.Err != nil:
		return 0, fmt.Errorf("kafka: metadata of %s: %w", topic, td.Err)
	}
	return len(td.Partitions), nil
}

// EndOffsets returns the end offset of every partition of an existing (logical) topic: the offset its next
// record will get.
func (a *Admin) EndOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	return a.listOffsets(ctx, topic, "end offsets", func(adm *kadm.Client, physical string) (kadm.ListedOffsets, error) {
		return adm.ListEndOffsets(ctx, physical)
	})
}

// listOffsets returns the offset list answered for every partition of topic (-1 for a timestamp no record
// reaches), failing unless every partition answered; what names the offsets in errors.
func (a *Admin) listOffsets(ctx context.Context, topic, what string,
	list func(adm *kadm.Client, physical string) (kadm.ListedOffsets, error)) (map[int]int64, error) {
	n, err := a.PartitionCount(ctx, topic)
	if err != nil {
		return nil, err
	}
	physical := a.cfg.Topic(topic)
	adm, err := a.kadm(ctx)
	if err != nil {
		return nil, err
	}
	offs, err := list(adm, physical)
	if err != nil {
		return nil, fmt.Errorf("kafka: %s of %s: %w", what, physical, a.cl.explain(ctx, err))
	}
	out := make(map[int]int64, n)
	for p, lo := range offs[physical] {
		if lo.Err != nil {
			return nil, fmt.Errorf("kafka: %s of %s/%d: %w", what, physical, p, lo.Err)
		}
		out[int(p)] = lo.Offset
	}
	if len(out) != n {
		return nil, fmt.Errorf("kafka: %s of %s: %d of %d partitions answered", what, physical, len(out), n)
	}
	return out, nil
}

// StartGroupAt commits offsets (partition -> next offset to read) of a (logical) topic for a consumer group
// that has no members yet, so that its consumers start each partition there rather than at the beginning. The
// group is namespaced like ConsumerConfig.Group. The broker refuses it while the group has members.
func (a *Admin) StartGroupAt(ctx context.Context, group, topic string, offsets map[int]int64) error {
	physical, id := a.cfg.Topic(topic), a.cfg.Topic(group)
	adm, err := a.kadm(ctx)
	if err != nil {
		return fmt.Errorf("kafka: set offsets of group %s on %s: %w", id, physical, err)
	}
	var commits kadm.Offsets
	for p, off := range offsets {
		commits.Add(kadm.Offset{Topic: physical, Partition: int32(p), At: off, LeaderEpoch: -1})
	}
	resp, err := adm.CommitOffsets(ctx, id, commits)
	if err != nil {
		return fmt.Errorf("kafka: set offsets of group %s on %s: %w", id, physical, a.cl.explain(ctx, err))
	}
	for p, r := range resp[physical] {
		if r.Err != nil {
			return fmt.Errorf("kafka: set offset of group %s on %s/%d: %w", id, physical, p, r.Err)
		}
	}
	return nil
}

// DeleteGroup deletes a consumer group (namespaced like ConsumerConfig.Group) and its committed offsets. The
// broker refuses it while the group has members; a group that does not exist is not an error.
func (a *Admin) DeleteGroup(ctx context.Context, group string) error {
	id := a.cfg.Topic(group)
	adm, err := a.kadm(ctx)
	if err != nil {
		return fmt.Errorf("kafka: delete group %s: %w", id, err)
	}
	resp, err := adm.DeleteGroup(ctx, id)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("kafka: delete group %s: %w", id, a.cl.explain(ctx, err))
	}
	if resp.Err != nil && !errors.Is(resp.Err, kerr.GroupIDNotFound) {
		return fmt.Errorf("kafka: delete group %s: %w", id, resp.Err)
	}
	return nil
}

// TopicConfigValue returns one config value of a (logical) topic (for example max.message.bytes), as the broker
// reports it.
func (a *Admin) TopicConfigValue(ctx context.Context, topic, name string) (string, error) {
	topic = a.cfg.Topic(topic)
	adm, err := a.kadm(ctx)
	if err != nil {
		return "", fmt.Errorf("kafka: config %s of %s: %w", name, topic, err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("kafka: config %s of %s: %w", name, topic, a.cl.explain(ctx, err))
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			return "", fmt.Errorf("kafka: config %s of %s: %w", name, topic, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == name && c.Value != nil {
				return *c.Value, nil
			}
		}
	}
	return "", fmt.Errorf("kafka: %s has no config %q", topic, name)
}

// CommittedOffsets returns a consumer group's committed offsets (partition -> next offset to read) on a
// (logical) topic; the group is namespaced like ConsumerConfig.Group. A partition without a commit is absent;
// a group that does not exist has none.
func (a *Admin) CommittedOffsets(ctx context.Context, group, topic string) (map[int]int64, error) {
	physical, id := a.cfg.Topic(topic), a.cfg.Topic(group)
	if _, err := a.PartitionCount(ctx, topic); err != nil {
		return nil, err
	}
	adm, err := a.kadm(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := adm.FetchOffsets(ctx, id)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int]int64{}, nil // a group that never committed (the embedded broker says so; Apache Kafka answers with no offsets)
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: committed offsets of group %s on %s: %w", id, physical, a.cl.explain(ctx, err))
	}
	out := map[int]int64{}
	for p, r := range resp[physical] {
		if r.Err != nil {
			return nil, fmt.Errorf("kafka: committed offset of group %s on %s/%d: %w", id, physical, p, r.Err)
		}
		if r.At >= 0 {
			out[int(p)] = r.At
		}
	}
	return out, nil
}

// Groups returns the ids of the consumer groups the cluster knows (physical names, namespace included).
func (a *Admin) Groups(ctx context.Context) ([]string, error) {
	adm, err := a.kadm(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka: list groups: %w", err)
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		err = fmt.Errorf("kafka: list groups: %w", a.cl.explain(ctx, err))
	}
	return groups.Groups(), err
}

// DeleteTopics deletes (logical) topics and everything on them.
func (a *Admin) DeleteTopics(ctx context.Context, names ...string) error {
	physical := make([]string, len(names))
	for i, n := range names {
		physical[i] = a.cfg.Topic(n)
	}
	adm, err := a.kadm(ctx)
	if err != nil {
		return fmt.Errorf("kafka: delete topics %v: %w", physical, err)
	}
	resp, err := adm.DeleteTopics(ctx, physical...)
	if err != nil {
		return fmt.Errorf("kafka: delete topics %v: %w", physical, a.cl.explain(ctx, err))
	}
	for _, t := range physical {
		if r := resp[t]; r.Err != nil {
			err = errors.Join(err, fmt.Errorf("kafka: delete topic %s: %w", t, r.Err))
		}
	}
	return err
}

// PartitionOf returns the partition, of a topic with n partitions, that a Producer writes a record keyed key to.
func PartitionOf(key string, n int) int { return keyPartition([]byte(key), n) }
