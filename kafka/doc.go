// Package kafka is draftflow's one door to Kafka: every request any stage, the sink or the command line sends
// to a broker goes through it. It owns
//
//   - Config (config.go): plain data saying how to reach the cluster and lay out topics (partitions, namespace,
//     input namespace, record size limit, retention); the zero value of every field but Brokers is a
//     documented default, and nothing in this package reads the environment (cmd/draftflow fills a Config
//     from flags and DRAFTFLOW_* variables);
//   - Client (client.go): made from a Config by NewClient, it owns the connections: the admin requests' client,
//     the Producers and Consumers it makes, and the readers of Follow and ReadPartition (reader.go). Close it
//     when done; there is no process-global connection state;
//   - Admin (admin.go, Client.Admin): EnsureTopics, partition counts, end and committed offsets, groups, topic
//     deletion, and the topic ID lookup (topicid.go); what an operator's view needs (groups.go): a group's
//     members (DescribeGroup), start offsets; offsets for a time and group resets for replay (replay.go); what
//     retention may cost a group (retention.go: RetentionRisk);
//   - Security (security.go): TLS and SASL (PLAIN, SCRAM-SHA-256/512) for every connection a Client opens, the
//     password held as a redacting secret.Value, and AuthError, which makes refused credentials a prompt, clear
//     error (Client.Ping);
//   - Producer (producer.go): asynchronous, acknowledged writes of encoded values whose done callback marks the
//     input finished; Close returns once every callback has run;
//   - Consumer (consumer.go): a consumer-group member that hands out Deliveries (with Revoking and Lost, the
//     signals of their partition being given up) and commits, per partition, the contiguous prefix of finished
//     offsets (watermark.go) with, in the commit's metadata, the offsets finished after it, which the
//     partition's next owner skips (handover.go);
//   - the plumbing metrics (metrics.go), among them each consumer's lag per partition it owns (lag.go).
//
// The package moves bytes: it knows no record type. A stage reads like a short story: a Consumer delivers a
// record, the stage does one thing, a Producer writes the result, and the delivery is marked Done once the
// result is durable in Kafka. Delivery is at-least-once; the sink makes output exactly-once. The stages do not
// wire these parts themselves: package kafka/stream is the record lifecycle they share (decoding with the
// topics/ codec, rejections and dead letters, the one produce policy, acknowledgement, the per-record metrics) on
// top of this package.
//
// One client library, franz-go: kgo for producers, consumer groups and partition readers, kadm for the admin
// requests, with TLS and SASL mapped once (client.go: franzOpts). The consumer groups are cooperative-sticky: a
// rebalance moves only the partitions that must move (kafka-go, which ran them before, rebalances only eagerly,
// measured at a 16-20% dip in the fleet's throughput per event; docs/architecture.md). franz-go writes too:
// `draftflow bench pipeline` against Apache Kafka 4.1.1, with the writers on kafka-go and on franz-go side by
// side, found franz-go at least as fast (20 interleaved pairs of 10,000-conversation runs on a loaded 2-core
// machine: franz-go faster in 15; medians of four batches of five, franz-go/kafka-go: 895/780, 1,333/1,470,
// 2,509/813 and 1,806/1,396 records/s). It compresses with zstd on its own pooled encoders (64 KiB window).
//
// The embedded broker lives in kafka/embedded, the test support in kafka/kafkatest.
package kafka
