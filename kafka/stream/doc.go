// Package stream is the record lifecycle every stage shares: a stage is given typed records and a place to put
// its results, and everything between a record arriving and its delivery being acknowledged exists here once:
//
//   - decoding (Consume): each consumed record is decoded with the topics/ codec into the stage's record type;
//     one that does not decode is dead-lettered with class Undecodable and acknowledged, and never reaches the
//     stage;
//   - the reject-and-finish path (Record.Reject): a dead letter on the rejected topic naming the record, its
//     payload trimmed to topics.MaxRejectedPayload and to what the topic accepts (deadletter.go: the one place a
//     payload is trimmed, and a refused dead letter written again with less), then the acknowledgement once the
//     dead letter is durable;
//   - the produce policy (Output.Send, Record.Produce), stated on Output.Send;
//   - asynchronous acknowledgement: a record may be finished from any goroutine, out of order, long after the
//     stage's handler returned (generate's requests, the sink's shard commits). Acknowledging a consumed record
//     marks its kafka.Delivery done, and the kafka.Consumer commits the contiguous finished prefix of each
//     partition with the offsets finished beyond it handed over in the commit's metadata: a rebalance redoes no
//     finished work;
//   - the per-record metrics: draftflow_records_total{stage, result, class} counts each record once, when its
//     result is decided (Record.Settle), and draftflow_tokens_total{stage} the tokens those results carried.
//     Every stage has the same two names; status reads them as they are.
//
// It lives under kafka/ because it is the typed half of the door to Kafka: stages reach Kafka only through
// kafka/ and this package, and never import each other. It imports kafka/ (consumers, producers),
// topics/ (the codecs) and metrics/; nothing of a stage.
package stream
