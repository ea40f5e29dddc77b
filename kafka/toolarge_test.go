package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
	"github.com/twmb/franz-go/pkg/kerr"
)

// smallTopics makes the pipeline's topics in a fresh namespace of the test's cluster accepting records of at
// most limit bytes, and returns a Config for them that keeps the default (larger) writer limit, logging into
// logs.
func smallTopics(t *testing.T, limit int, logs *testutil.Buffer) kafka.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	small := kafkatest.Cluster(t, kafka.Config{Partitions: 1, MaxMessageBytes: limit, Logger: slog.New(slog.DiscardHandler)})
	if err := kafkatest.Client(t, small).Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	cfg := small
	cfg.MaxMessageBytes = 0
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return cfg
}

func randomIDs(r *rand.Rand, n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = r.Uint32()
	}
	return ids
}

func TestIsRecordTooLarge(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{kafka.ErrRecordTooLarge, true},
		{fmt.Errorf("kafka: record %q: %w", "x", kafka.ErrRecordTooLarge), true},
		{kerr.MessageTooLarge, true},
		{fmt.Errorf("%w (uncompressed_bytes=9, compressed_bytes=9)", kerr.MessageTooLarge), true},
		{fmt.Errorf("kafka: write: %w", kerr.MessageTooLarge), true},
		{kerr.RequestTimedOut, false},
		{kerr.LeaderNotAvailable, false},
		{errors.New("message size too large"), false},
	} {
		if got := kafka.IsRecordTooLarge(c.err); got != c.want {
			t.Errorf("IsRecordTooLarge(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A record the broker refuses as over the topic's max.message.bytes fails permanently, like one over the
// client-side limit: its done error is ErrRecordTooLarge naming size and limit; records that shared its batch
// are still written; and the same record is refused at once when sent again.
func TestBrokerRefusedRecordIsTooLarge(t *testing.T) {
	const limit = 16 << 10
	var logs testutil.Buffer
	cfg := smallTopics(t, limit, &logs)
	cl := kafkatest.Client(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := rand.New(rand.NewPCG(1, 2))
	p := cl.NewProducer(topics.TopicTokenized, kafka.ProducerConfig{BatchTimeout: 50 * time.Millisecond})
	defer p.Close()

	big := &topics.Tokenized{ID: "big", InputIDs: randomIDs(r, 10000)} // ~40 KB that zstd cannot shrink
	type result struct {
		id  string
		err error
	}
	results := make(chan result, 64)
	send := func(rec *topics.Tokenized) {
		if err := p.Send(ctx, rec.ID, kafkatest.Encode(t, rec), func(err error) { results <- result{rec.ID, err} }); err != nil {
			t.Fatalf("send %s: %v", rec.ID, err)
		}
	}
	// Sent together, so that the big record shares a batch with small ones.
	for i := 0; i < 20; i++ {
		if i == 10 {
			send(big)
		}
		send(&topics.Tokenized{ID: "small-" + strconv.Itoa(i), InputIDs: []uint32{uint32(i)}})
	}
	var bigErr error
	for i := 0; i < 21; i++ {
		select {
		case res := <-results:
			if res.id == "big" {
				bigErr = res.err
			} else if res.err != nil {
				t.Errorf("%s: %v", res.id, res.err)
			}
		case <-ctx.Done():
			t.Fatalf("only %d of 21 records answered", i)
		}
	}
	if !errors.Is(bigErr, kafka.ErrRecordTooLarge) || !kafka.IsRecordTooLarge(bigErr) {
		t.Fatalf("big record: error %v, want one wrapping ErrRecordTooLarge", bigErr)
	}
	if msg := bigErr.Error(); !strings.Contains(msg, "refused") || !strings.Contains(msg, strconv.Itoa(limit)) ||
		!strings.Contains(msg, `"big"`) {
		t.Errorf("reason %q does not name the record, the refusal and the %d-byte limit", msg, limit)
	}
	if err := p.Send(ctx, big.ID, kafkatest.Encode(t, big), func(err error) { t.Errorf("re-sent big record answered %v", err) }); !errors.Is(err, kafka.ErrRecordTooLarge) {
		t.Errorf("re-sent big record: Send returned %v, want ErrRecordTooLarge at once", err)
	}
	if !strings.Contains(logs.String(), "max_message_bytes="+strconv.Itoa(limit)) {
		t.Errorf("no warning naming the topic's limit in the logs:\n%s", logs.String())
	}
}

// EnsureTopics reuses a topic whose max.message.bytes is below the configured limit, and warns about it.
func TestEnsureTopicsWarnsAboutSmallExistingTopic(t *testing.T) {
	var logs testutil.Buffer
	cfg := smallTopics(t, 64<<10, &logs)
	cl := kafkatest.Client(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Admin().EnsureTopics(ctx, topics.TopicGenerated); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "topic="+cfg.Topic(topics.TopicGenerated)) ||
		!strings.Contains(out, "max_message_bytes=65536") || !strings.Contains(out, "configured_max_message_bytes=8388608") {
		t.Errorf("no warning naming the topic and both sizes:\n%s", out)
	}
	if v, err := cl.Admin().TopicConfigValue(ctx, topics.TopicGenerated, "max.message.bytes"); err != nil || v != "65536" {
		t.Errorf("max.message.bytes now %q (%v); the topic must be left as it is", v, err)
	}
	// A topic at the configured limit is not warned about.
	var quiet testutil.Buffer
	ok := cfg
	ok.MaxMessageBytes = 64 << 10
	ok.Logger = slog.New(slog.NewTextHandler(&quiet, nil))
	if err := kafkatest.Client(t, ok).Admin().EnsureTopics(ctx, topics.TopicGenerated); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(quiet.String(), "level=WARN") {
		t.Errorf("warning for a topic that fits:\n%s", quiet.String())
	}
}
