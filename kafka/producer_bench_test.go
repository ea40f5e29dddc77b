package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// BenchmarkProducer writes records through a Producer with 4,096 unacknowledged at most (ingest's window),
// compressed and not, side by side: records/s and the peak Go heap in use. Small records are prompts; large ones
// tokenized prompts of 2,000 tokens. On the embedded broker, or DRAFTFLOW_TEST_BROKERS.
func BenchmarkProducer(b *testing.B) {
	for _, size := range []struct {
		name   string
		tokens int
	}{{"small", 20}, {"large", 2000}} {
		for _, compress := range []bool{true, false} {
			b.Run(size.name+"/zstd="+strconv.FormatBool(compress), func(b *testing.B) {
				cfg := kafkatest.Config(b, 8)
				cl := kafkatest.Client(b, cfg)
				if err := cl.Admin().EnsureTopics(context.Background(), topics.TopicTokenized); err != nil {
					b.Fatal(err)
				}
				p := cl.NewProducer(topics.TopicTokenized, kafka.ProducerConfig{NoCompression: !compress})
				defer p.Close()
				rec := &topics.Tokenized{InputIDs: make([]uint32, size.tokens)}
				for i := range rec.InputIDs {
					rec.InputIDs[i] = uint32(i * 7919 % 150000)
				}
				window := make(chan struct{}, 4096)
				var wg sync.WaitGroup
				peak := kafka.SamplePeakHeap()
				start := time.Now()
				n := 0
				for b.Loop() {
					for range 1000 {
						window <- struct{}{}
						wg.Add(1)
						rec.ID = "r" + strconv.Itoa(n)
						n++
						if err := p.Send(context.Background(), rec.ID, kafkatest.Encode(b, rec), func(err error) {
							if err != nil {
								b.Error(err)
							}
							<-window
							wg.Done()
						}); err != nil {
							b.Fatal(err)
						}
					}
				}
				wg.Wait()
				b.ReportMetric(float64(n)/time.Since(start).Seconds(), "records/s")
				b.ReportMetric(peak(), "heap-MiB")
			})
		}
	}
}
