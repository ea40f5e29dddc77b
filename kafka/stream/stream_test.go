package stream_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/metrics/metricstest"
	"github.com/draftflow/draftflow/topics"
)

var quiet = slog.New(slog.DiscardHandler)

// counted returns draftflow_records_total{stage, result, class} of reg.
func counted(t *testing.T, reg *prometheus.Registry, stage, result, class string) float64 {
	t.Helper()
	return metricstest.Counter(t, reg, "draftflow_records_total", map[string]string{"stage": stage, "result": result, "class": class})
}

// committed returns the group's committed offset of partition 0 of the tokenized topic (-1: none).
func committed(t *testing.T, cl *kafka.Client, group string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := cl.Admin().CommittedOffsets(ctx, group, topics.TopicTokenized)
	if err != nil {
		t.Fatal(err)
	}
	if off, ok := offs[0]; ok {
		return off
	}
	return -1
}

// waitCommitted waits until the group's committed offset of partition 0 is want.
func waitCommitted(t *testing.T, cl *kafka.Client, group string, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := committed(t, cl, group)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed offset %d, want %d", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tokenized(ids ...string) []kafkatest.Record {
	var recs []kafkatest.Record
	for _, id := range ids {
		recs = append(recs, kafkatest.Record{Key: id, Value: &topics.Tokenized{ID: id, Dataset: "d", InputIDs: []uint32{1, 2, 3}}})
	}
	return recs
}

// commitInterval is how often the consumers of run commit.
const commitInterval = 20 * time.Millisecond

// run consumes the tokenized topic in group through stage st, calling handle, until the returned stop is called;
// stop returns Consume's error.
func run(t *testing.T, kc kafka.Config, st *stream.Stage, group string, opt stream.Options[topics.Tokenized],
	handle func(*stream.Record[topics.Tokenized])) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in := kafkatest.Client(t, kc).NewConsumer(topics.TopicTokenized, kafka.ConsumerConfig{Group: group, SessionTimeout: 6 * time.Second,
		DrainTimeout: 2 * time.Second, CommitInterval: commitInterval})
	errc := make(chan error, 1)
	go func() { errc <- stream.Consume(ctx, st, opt, handle, in) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-errc })
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// A record that does not decode never reaches the handler: it is dead-lettered once, with class undecodable,
// its payload and where it was, counted once as rejected, and acknowledged (its offset is committed).
func TestUndecodableRejectedOnceAndAcknowledged(t *testing.T) {
	kc := kafkatest.Config(t, 1)
	kc.Logger = quiet
	admin := kafkatest.Client(t, kc)
	garbage := []byte("this is no record")
	kafkatest.Produce(t, kc, topics.TopicTokenized, append([]kafkatest.Record{{Key: "broken", Value: garbage}}, tokenized("ok")...)...)
	reg := prometheus.NewRegistry()
	st := stream.New(context.Background(), stream.Config{Client: kafkatest.Client(t, kc), Stage: "generate", Registerer: reg, Logger: quiet})
	defer st.Close()
	var mu sync.Mutex
	var handled []string
	stop := run(t, kc, st, "g", stream.Options[topics.Tokenized]{}, func(r *stream.Record[topics.Tokenized]) {
		mu.Lock()
		handled = append(handled, r.Value.ID)
		mu.Unlock()
		r.Finish(stream.Outcome{Result: "generated", Tokens: len(r.Value.InputIDs)})
	})
	waitCommitted(t, admin, "g", 2)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(handled) != "[ok]" {
		t.Fatalf("handled %v, want [ok]", handled)
	}
	rejs := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 1, 30*time.Second)
	if len(rejs) != 1 {
		t.Fatalf("%d dead letters, want 1", len(rejs))
	}
	r := rejs[0]
	if r.Stage != "generate" || r.Class != stream.Undecodable || r.ID != "broken" || r.Offset != 0 || r.Topic != kc.Topic(topics.TopicTokenized) ||
		string(r.Payload) != string(garbage) || r.Reason == "" {
		t.Fatalf("dead letter %+v", r)
	}
	if n := counted(t, reg, "generate", stream.Rejected, stream.Undecodable); n != 1 {
		t.Fatalf("rejected{undecodable} counted %v times, want 1", n)
	}
	if n := counted(t, reg, "generate", "generated", ""); n != 1 {
		t.Fatalf("generated counted %v times, want 1", n)
	}
}

// Records finished out of order from other goroutines, and one settled now and acknowledged later (the sink's
// shard commit), are committed only as a contiguous prefix: nothing before the first record is finished, all of
// it once it is. Each outcome is counted when settled, before the acknowledgement.
func TestAsynchronousAcknowledgementCommitsThePrefix(t *testing.T) {
	kc := kafkatest.Config(t, 1)
	kc.Logger = quiet
	admin := kafkatest.Client(t, kc)
	ids := []string{"a", "b", "c", "d", "e"}
	kafkatest.Produce(t, kc, topics.TopicTokenized, tokenized(ids...)...)
	reg := prometheus.NewRegistry()
	st := stream.New(context.Background(), stream.Config{Client: kafkatest.Client(t, kc), Stage: "sink", Registerer: reg, Logger: quiet})
	defer st.Close()
	got := make(chan *stream.Record[topics.Tokenized], len(ids))
	stop := run(t, kc, st, "g", stream.Options[topics.Tokenized]{}, func(r *stream.Record[topics.Tokenized]) { got <- r })
	var recs []*stream.Record[topics.Tokenized]
	for range ids {
		select {
		case r := <-got:
			recs = append(recs, r)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d records handed out", len(recs), len(ids))
		}
	}
	// The last four finish in reverse order, concurrently; the first is settled but not acknowledged.
	var wg sync.WaitGroup
	for i := len(recs) - 1; i >= 1; i-- {
		wg.Add(1)
		go func(r *stream.Record[topics.Tokenized]) {
			defer wg.Done()
			r.Finish(stream.Outcome{Result: "written", Tokens: 3})
		}(recs[i])
	}
	wg.Wait()
	recs[0].Settle(stream.Outcome{Result: "written", Tokens: 3})
	if n := counted(t, reg, "sink", "written", ""); n != 5 {
		t.Fatalf("written counted %v times, want 5 (settled counts before the acknowledgement)", n)
	}
	// Ten commit intervals pass: the unacknowledged first record holds the partition's commit.
	time.Sleep(10 * commitInterval)
	if off := committed(t, admin, "g"); off > 0 {
		t.Fatalf("committed offset %d while offset 0 is unacknowledged", off)
	}
	recs[0].Ack()
	waitCommitted(t, admin, "g", 5)
	recs[0].Ack() // once only: nothing happens
	recs[2].Finish(stream.Outcome{Result: "written"})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := counted(t, reg, "sink", "written", ""); n != 5 {
		t.Fatalf("written counted %v times after repeated calls, want 5", n)
	}
}

// The produce policy: a broker failing the writes holds the record back (retried, neither finished nor dropped,
// the stage goes on) for as long as the stage's context lives; when the context ends first the record is
// abandoned (not committed, not counted) and redelivered to the next run, which writes it once the broker
// accepts writes again.
func TestProduceRetriesWhileTheContextLives(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("fails writes through the embedded broker's control hooks")
	}
	e := kafkatest.Embedded(t)
	kc := kafka.Config{Brokers: e.Brokers(), Partitions: 1, Namespace: "t-stream-policy", Logger: quiet}
	if err := kafkatest.Client(t, kc).Admin().EnsureTopics(context.Background(), topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	admin := kafkatest.Client(t, kc)
	kafkatest.Produce(t, kc, topics.TopicTokenized, tokenized("held")...)
	refused, accept := kafkatest.RefuseProduce(e, kc.Topic(topics.TopicGenerated))

	reg := prometheus.NewRegistry()
	work, stopWork := context.WithCancel(context.Background())
	st := stream.New(work, stream.Config{Client: kafkatest.Client(t, kc), Stage: "generate", Registerer: reg, Logger: quiet})
	out := st.Output(topics.TopicGenerated)
	produce := func(r *stream.Record[topics.Tokenized]) {
		r.Produce(out, r.Value.ID, &topics.Generation{ID: r.Value.ID, PromptIDs: r.Value.InputIDs, OutputIDs: []uint32{9}},
			stream.Outcome{Result: "generated", Tokens: 1})
	}
	stop := run(t, kc, st, "g", stream.Options[topics.Tokenized]{}, produce)
	deadline := time.Now().Add(30 * time.Second)
	for refused.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes refused in 30 s: not retried", refused.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := counted(t, reg, "generate", "generated", ""); n != 0 || st.Err() != nil {
		t.Fatalf("while the broker refuses: counted %v, stage error %v", n, st.Err())
	}
	stopWork() // shutdown: the pending write gives up, the record is abandoned
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if off := committed(t, admin, "g"); off > 0 || counted(t, reg, "generate", "generated", "") != 0 {
		t.Fatalf("abandoned record committed (offset %d) or counted", off)
	}

	// The next run gets the record again and writes it once the broker accepts.
	accept()
	reg2 := prometheus.NewRegistry()
	st2 := stream.New(context.Background(), stream.Config{Client: kafkatest.Client(t, kc), Stage: "generate", Registerer: reg2, Logger: quiet})
	defer st2.Close()
	out = st2.Output(topics.TopicGenerated)
	stop = run(t, kc, st2, "g", stream.Options[topics.Tokenized]{}, produce)
	waitCommitted(t, admin, "g", 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := counted(t, reg2, "generate", "generated", ""); n != 1 {
		t.Fatalf("generated counted %v, want 1", n)
	}
	if got := kafkatest.Collect[topics.Generation](t, kc, topics.TopicGenerated, 1, 30*time.Second); len(got) != 1 || got[0].ID != "held" {
		t.Fatalf("generated topic holds %v", got)
	}
}

// A result that can never be written (over the message size limit) is dead-lettered with class too_large and
// the record acknowledged: the partition goes on.
func TestProduceRejectsWhatCanNeverBeWritten(t *testing.T) {
	kc := kafkatest.Config(t, 1)
	kc.Logger = quiet
	admin := kafkatest.Client(t, kc)
	kafkatest.Produce(t, kc, topics.TopicTokenized, tokenized("huge", "small")...)
	small := kc
	small.MaxMessageBytes = 8 << 10
	reg := prometheus.NewRegistry()
	st := stream.New(context.Background(), stream.Config{Client: kafkatest.Client(t, small), Stage: "tokenize", Registerer: reg, Logger: quiet})
	defer st.Close()
	out := st.Output(topics.TopicGenerated)
	stop := run(t, kc, st, "g", stream.Options[topics.Tokenized]{Workers: 2}, func(r *stream.Record[topics.Tokenized]) {
		g := &topics.Generation{ID: r.Value.ID, PromptIDs: r.Value.InputIDs, OutputIDs: []uint32{1}}
		if r.Value.ID == "huge" {
			g.OutputIDs = make([]uint32, 16<<10)
			for i := range g.OutputIDs {
				g.OutputIDs[i] = uint32(i * 7919)
			}
		}
		r.Produce(out, g.ID, g, stream.Outcome{Result: "generated"})
	})
	waitCommitted(t, admin, "g", 2)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rejs := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 1, 30*time.Second)
	if len(rejs) != 1 || rejs[0].ID != "huge" || rejs[0].Class != stream.TooLarge || rejs[0].Stage != "tokenize" || rejs[0].Dataset != "d" {
		t.Fatalf("dead letters %+v", rejs)
	}
	if counted(t, reg, "tokenize", stream.Rejected, stream.TooLarge) != 1 || counted(t, reg, "tokenize", "generated", "") != 1 {
		t.Fatal("outcomes not counted once each")
	}
}

// Records that did not come from Kafka (ingest's lines): at most MaxInFlight unfinished, Wait waits for all, each
// ends once with its outcome or the error that abandoned it, and each outcome counts once however often the
// record is finished.
func TestFromRecordsEndOnceAndCountOnce(t *testing.T) {
	kc := kafkatest.Config(t, 1)
	kc.Logger = quiet
	reg := prometheus.NewRegistry()
	st := stream.New(context.Background(), stream.Config{Client: kafkatest.Client(t, kc), Stage: "ingest", Registerer: reg, Logger: quiet, MaxInFlight: 2})
	out := st.Output(topics.TopicPrompts)
	var mu sync.Mutex
	ends := map[string][]string{}
	then := func(id string) func(stream.Outcome, error) {
		return func(o stream.Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			ends[id] = append(ends[id], fmt.Sprintf("%s/%s/%v", o.Result, o.Class, err))
		}
	}
	for i := range 10 {
		p := &topics.Prompt{ID: fmt.Sprint("p", i), Dataset: "d"}
		r := stream.From(st, p, fmt.Sprintf("in.jsonl line %d", i+1), then(p.ID))
		if i%5 == 4 {
			r.Reject("bad_field", "a bad line", []byte("{...}"))
			continue
		}
		r.Produce(out, p.ID, p, stream.Outcome{Result: "ingested"})
	}
	twice := stream.From(st, &topics.Prompt{ID: "twice"}, "x", then("twice"))
	twice.Finish(stream.Outcome{Result: "ingested"})
	twice.Finish(stream.Outcome{Result: "ingested"})
	twice.Abandon()
	st.Wait()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if counted(t, reg, "ingest", "ingested", "") != 9 || counted(t, reg, "ingest", stream.Rejected, "bad_field") != 2 {
		t.Fatalf("counted %v ingested, %v rejected", counted(t, reg, "ingest", "ingested", ""), counted(t, reg, "ingest", stream.Rejected, "bad_field"))
	}
	if len(ends) != 11 {
		t.Fatalf("%d records ended, want 11: %v", len(ends), ends)
	}
	for id, e := range ends {
		if len(e) != 1 {
			t.Errorf("%s ended %d times: %v", id, len(e), e)
		}
	}
	if ends["p4"][0] != "rejected/bad_field/<nil>" || ends["p0"][0] != "ingested//<nil>" {
		t.Errorf("ends %v", ends)
	}
	rejs := kafkatest.Collect[topics.Rejection](t, kc, topics.TopicRejected, 2, 30*time.Second)
	if len(rejs) != 2 || string(rejs[0].Payload) != "{...}" || rejs[0].Stage != "ingest" {
		t.Fatalf("dead letters %+v", rejs)
	}

}
