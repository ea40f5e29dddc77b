package kafka

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicID returns the hex ID of a (logical) topic: the UUID a broker gives a topic when it creates it
// (Metadata v10+, Kafka 2.8 and later), or "" when the broker does not report topic IDs. Offsets are only
// meaningful within one incarnation of a topic: a topic deleted and recreated, or the embedded broker of
// another `draftflow run`, starts again at offset 0. The sink keys its recovery point by this ID so it never
// mistakes new records for ones it already wrote.
func (a *Admin) TopicID(ctx context.Context, topic string) (string, error) {
	topic = a.cfg.Topic(topic)
	cl, err := a.cl.franzAdmin(ctx)
	if err != nil {
		return "", fmt.Errorf("kafka: metadata of %s: %w", topic, err)
	}
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("kafka: metadata of %s: %w", topic, a.cl.explain(ctx, err))
	}
	for _, rt := range resp.Topics {
		if rt.Topic == nil || *rt.Topic != topic {
			continue
		}
		if rt.ErrorCode != 0 {
			return "", fmt.Errorf("kafka: metadata of %s: error code %d", topic, rt.ErrorCode)
		}
		if rt.TopicID == [16]byte{} {
			return "", nil
		}
		return hex.EncodeToString(rt.TopicID[:]), nil
	}
	return "", fmt.Errorf("kafka: metadata of %s: topic not in the response", topic)
}
