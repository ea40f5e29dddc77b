// Package kafka is draftflow's one door to Kafka: every request any stage, the sink or the command line sends
// to a broker goes through it. It owns
//
//   - Config (config.go): plain data saying how to reach the cluster and lay out topics (partitions, namespace,
//     input namespace, record size limit, retention); the zero value of every field but Brokers is a
//     documented default, and nothing in this package reads the environment (cmd/draftflow fills a Config
//     from flags and DRAFTFLOW_* variables);
//   - Client (client.go): made from a Config by NewClient, it owns the connections: the admin requests'
//     connection pool, the Producers and Consumers it makes, and the readers of Follow and
//     ReadPartition. Close it when done; there is no process-global connection state;
//   - Admin (admin.go, Client.Admin): EnsureTopics, partition counts, end and committed offsets, groups, topic
//     deletion, and the topic ID lookup (topicid.go); what an operator's view needs (groups.go): a group's
//     members (DescribeGroup), start offsets; offsets for a time and group resets for replay (replay.go); what
//     retention may cost a group (retention.go: RetentionRisk);
//   - Security (security.go): TLS and SASL (PLAIN, SCRAM-SHA-256/512) for every connection a Client opens, the
//     password held as a redacting secret.Value, and AuthError, which makes refused credentials a prompt, clear error (Client.Ping);
//   - Producer (producer.go): asynchronous, acknowledged writes whose done callback marks the input finished;
//     Close returns once every callback has run;
//   - Consumer (consumer.go): a consumer-group member that hands out Deliveries (with Revoking and Lost, the
//     signals of their partition being given up) and commits, per partition, the contiguous prefix of finished
//     offsets (watermark.go) with, in the commit's metadata, the offsets finished after it, which the
//     partition's next owner skips (handover.go);
//   - the plumbing metrics (metrics.go), among them each consumer's lag per partition it owns (lag.go).
//
// A stage reads like a short story: a Consumer delivers a record, the stage does one thing, a Producer writes
// the result, and the delivery is marked Done once the result is durable in Kafka. Delivery is at-least-once;
// the sink makes output exactly-once. The stages do not wire these parts themselves: package kafka/stream is
// the record lifecycle they share (decoding, rejections, the one produce policy, acknowledgement, the
// per-record metrics) on top of this package.
//
// Two clients, each where the figures put it. segmentio/kafka-go writes and administers: writers with an explicit
// BatchTimeout, RequiredAcks=RequireAll and zstd (this package's own codec, zstd.go: whole batches on shared
// encoders, not kafka-go's pooled 16 MiB ones, registered in kafka-go's codec table once, by NewClient), and the
// admin requests. franz-go runs the consumer groups: kafka-go rebalances only eagerly (every member gives up every
// partition on each join or leave), which `make rebalance` measured at a 16-20% dip in the fleet's throughput per
// event; franz-go's cooperative-sticky assignment moves only the partitions that must move (docs/architecture.md).
// The Consumer commits synchronously through franz-go, with the finished offsets in the commit's metadata. The
// requests kafka-go cannot send or decode (Metadata v10 for topic IDs, descriptions of cooperative groups)
// go through one franz-go client the Client owns, with the same TLS and SASL. The embedded broker lives in
// kafka/embedded, the test support in kafka/kafkatest.
package kafka
