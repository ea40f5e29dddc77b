// Package topics is the contract between draftflow's stages: the topic names, the record types that
// flow on them, their versioned binary encoding, and the Kafka plumbing every stage uses.
//
// Stages never import each other; they share only this package. A stage reads like a short story:
// a Consumer delivers a record, the stage does one thing, a Producer writes the result, and the
// delivery is marked Done once the result is durable in Kafka. The Consumer commits, per partition,
// only the contiguous prefix of offsets whose deliveries are Done (a watermark), so work that
// completes out of order never commits past unfinished work, and a crash redelivers at most the
// in-flight window. Delivery is therefore at-least-once; the sink makes output exactly-once.
//
// The plumbing is segmentio/kafka-go: writers with an explicit BatchTimeout, RequiredAcks=RequireAll and
// zstd; readers with FetchMessage and explicit, synchronous commits. EnsureTopics creates topics with a
// configurable partition count and reuses existing ones. StartEmbedded runs an in-process
// Kafka-protocol broker (franz-go's kfake) for the default single-process run and for tests.
package topics
