// Package topicid looks up the Kafka topic ID (the UUID a broker gives a topic when it creates it, Metadata
// v10+, Kafka 2.8 and later). Offsets are only meaningful within one incarnation of a topic: a topic deleted
// and recreated, or the in-process broker of another `draftflow run`, starts again at offset 0. The sink keys
// its recovery point by this ID so it never mistakes new records for ones it already wrote.
//
// kafka-go, the project's client, negotiates Metadata v1/v6 and cannot see topic IDs, so this one lookup uses
// franz-go's request types (already a dependency through the embedded broker).
package topicid

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Lookup returns the hex topic ID of topic, or "" when the broker does not report topic IDs.
func Lookup(ctx context.Context, brokers []string, clientID, topic string) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID(clientID))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("metadata of %s: %w", topic, err)
	}
	for _, rt := range resp.Topics {
		if rt.Topic == nil || *rt.Topic != topic {
			continue
		}
		if rt.ErrorCode != 0 {
			return "", fmt.Errorf("metadata of %s: error code %d", topic, rt.ErrorCode)
		}
		if rt.TopicID == [16]byte{} {
			return "", nil
		}
		return hex.EncodeToString(rt.TopicID[:]), nil
	}
	return "", fmt.Errorf("metadata of %s: topic not in the response", topic)
}
