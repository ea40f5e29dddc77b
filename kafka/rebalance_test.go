package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

// generateLike is the generate stage reduced to its shape: each tokenized record is slow work (a simulated
// GPU generation) done concurrently, its Generation is produced, and the delivery is Done in the produce
// acknowledgement. It counts generations produced per id, which is what the sink sees: every generation of an
// id beyond the first is work redone (the sink drops it as a duplicate).
type generateLike struct {
	cfg      kafka.Config
	out      *kafka.Producer
	work     func() time.Duration
	mu       sync.Mutex
	produced map[string]int
	started  atomic.Int64
	change   chan struct{}
}

func newGenerateLike(t *testing.T, cfg kafka.Config, work func() time.Duration) *generateLike {
	g := &generateLike{cfg: cfg, out: kafkatest.Client(t, cfg).NewProducer(topics.TopicGenerated, kafka.ProducerConfig{}), work: work,
		produced: map[string]int{}, change: make(chan struct{}, 1)}
	t.Cleanup(func() {
		if err := g.out.Close(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// member runs one replica until ctx ends; dead, once set, makes its unfinished work vanish as in a killed
// process (nothing more is produced or finished). seen, if not nil, is told of every delivery handed out.
func (g *generateLike) member(ctx context.Context, c *kafka.Consumer, dead *atomic.Bool, seen func(*kafka.Delivery)) error {
	return c.Run(ctx, func(d *kafka.Delivery) {
		var rec topics.Tokenized
		if err := topics.Unmarshal(d.Message.Value, &rec); err != nil {
			panic(err)
		}
		if seen != nil {
			seen(d)
		}
		g.started.Add(1)
		go func() {
			time.Sleep(g.work())
			if dead != nil && dead.Load() {
				return
			}
			gen, err := topics.Marshal(&topics.Generation{ID: rec.ID, PromptIDs: rec.InputIDs, OutputIDs: []uint32{1, 2, 3}})
			if err != nil {
				d.Abandon()
				return
			}
			if err := g.out.Send(context.Background(), rec.ID, gen, func(err error) {
				if err != nil {
					d.Abandon()
					return
				}
				g.mu.Lock()
				g.produced[rec.ID]++
				g.mu.Unlock()
				select {
				case g.change <- struct{}{}:
				default:
				}
				d.Done()
			}); err != nil {
				d.Abandon()
			}
		}()
	})
}

// counts returns the generations produced and the distinct ids among them.
func (g *generateLike) counts() (gens, distinct int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range g.produced {
		gens += n
	}
	return gens, len(g.produced)
}

// waitAll waits until n distinct ids were produced.
func (g *generateLike) waitAll(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if _, d := g.counts(); d >= n {
			return
		}
		select {
		case <-g.change:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			_, d := g.counts()
			t.Fatalf("%d of %d ids generated after %v", d, n, timeout)
		}
	}
}

// offsetWatch reads the group's committed offsets over time (an admin read, as an operator would) and records
// every time one moved backwards.
type offsetWatch struct {
	mu        sync.Mutex
	last      map[int]int64
	backwards []string
	reads     int
}

func watchOffsets(ctx context.Context, admin *kafka.Admin, group string) *offsetWatch {
	w := &offsetWatch{last: map[int]int64{}}
	go func() {
		for ctx.Err() == nil {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			offs, err := admin.CommittedOffsets(rctx, group, topics.TopicTokenized)
			cancel()
			if err == nil {
				w.mu.Lock()
				w.reads++
				for p, off := range offs {
					if prev, ok := w.last[p]; ok && off < prev {
						w.backwards = append(w.backwards, fmt.Sprintf("partition %d: %d -> %d", p, prev, off))
					}
					w.last[p] = max(w.last[p], off)
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return w
}

// count returns how many times the offsets were read so far.
func (w *offsetWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reads
}

func (w *offsetWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reads < 10 {
		t.Errorf("only %d reads of the committed offsets", w.reads)
	}
	for _, b := range w.backwards {
		t.Errorf("committed offset moved backwards: %s", b)
	}
}

func produceTokenized(t *testing.T, cfg kafka.Config, n int) {
	t.Helper()
	recs := make([]kafkatest.Record, n)
	for i := range recs {
		rec := &topics.Tokenized{ID: "p" + strconv.Itoa(i), InputIDs: []uint32{uint32(i)}}
		recs[i] = kafkatest.Record{Key: rec.ID, Value: rec}
	}
	kafkatest.Produce(t, cfg, topics.TopicTokenized, recs...)
}

func slowWork() time.Duration { return 100*time.Millisecond + rand.N(400*time.Millisecond) }

// The rebalance scenario of docs/performance.md, scaled down: prompts flow through a generate-like stage with
// slow work in flight; two replicas share the group, a third joins, then one of the first two leaves gracefully
// (its context ends, as on SIGTERM). At most 2% of the generations are redone, and the committed offsets never
// move backwards.
func TestConsumerRebalanceRedoesNoWork(t *testing.T) {
	cfg := kafkatest.Config(t, 8)
	const n = 1600
	produceTokenized(t, cfg, n)
	g := newGenerateLike(t, cfg, slowWork)
	cc := kafka.ConsumerConfig{Group: "gen", MaxInFlight: 24, SessionTimeout: 6 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := kafkatest.Client(t, cfg)
	watch := watchOffsets(ctx, cl.Admin(), cc.Group)

	var wg sync.WaitGroup
	run := func(ctx context.Context) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.member(ctx, cl.NewConsumer(topics.TopicTokenized, cc), nil, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	start := time.Now()
	leaverCtx, leave := context.WithCancel(ctx)
	run(leaverCtx)
	run(ctx)
	// The scenario's clock is the work done: a replica joins at a quarter of it, another leaves at half.
	g.waitAll(t, n/4, time.Minute)
	run(ctx)
	g.waitAll(t, n/2, time.Minute)
	leave()
	g.waitAll(t, n, 2*time.Minute)
	elapsed := time.Since(start)
	cancel()
	wg.Wait()

	gens, distinct := g.counts()
	redone := gens - distinct
	t.Logf("%d prompts in %v: %d generations, %d redone (%.2f%%), %d work items started; committed offsets read %d times",
		n, elapsed.Round(time.Millisecond), gens, redone, 100*float64(redone)/float64(gens), g.started.Load(), watch.count())
	if float64(redone) > 0.02*float64(gens) {
		t.Errorf("%d of %d generations redone, over 2%%", redone, gens)
	}
	watch.check(t)
}

// crashMember makes the embedded broker treat the group member whose client id is clientID as a killed
// process once the returned function is called: every group request of that member (heartbeats, commits, joins,
// syncs, leaves) has its connection closed unanswered, so the member never commits again, never leaves, and
// the coordinator drops it only when its session times out. Fresh joins (no member id) are refused too: the
// other members of the test keep theirs. Its fetches still work: what it is handed after the
// crash is simply never finished, as in a process that is gone.
func crashMember(e *embedded.Broker, clientID string) (crash func()) {
	var crashed atomic.Bool
	prefix := clientID + "-" // the broker's member ids are "<client id>-<uuid>"
	c := e.Cluster()
	for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.OffsetCommit, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.LeaveGroup} {
		c.ControlKey(int16(key), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if !crashed.Load() {
				return nil, nil, false
			}
			var ids []string
			switch r := kreq.(type) {
			case *kmsg.HeartbeatRequest:
				ids = append(ids, r.MemberID)
			case *kmsg.OffsetCommitRequest:
				ids = append(ids, r.MemberID)
			case *kmsg.JoinGroupRequest:
				if r.MemberID == "" {
					// A fresh join: kafka-go sends one when its member's joins keep failing. After the crash it
					// can only be the crashed member's (the others keep their member ids), and a killed process
					// joins nothing.
					return nil, errors.New("member crashed"), true
				}
				ids = append(ids, r.MemberID)
			case *kmsg.SyncGroupRequest:
				ids = append(ids, r.MemberID)
			case *kmsg.LeaveGroupRequest:
				ids = append(ids, r.MemberID)
				for _, m := range r.Members {
					ids = append(ids, m.MemberID)
				}
			}
			for _, id := range ids {
				if strings.HasPrefix(id, prefix) {
					return nil, errors.New("member crashed"), true
				}
			}
			return nil, nil, false
		})
	}
	return func() { crashed.Store(true) }
}

// A replica that crashes (stops without draining or committing) causes at most its uncommitted window, the
// deliveries it was handed after its last commit, to be done again by the replica that takes its partitions
// over; committed offsets still never move backwards.
func TestConsumerCrashRedoesAtMostInFlightWindow(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("crashes a member through the embedded broker's control hooks")
	}
	e := kafkatest.Embedded(t)
	cfg := kafka.Config{Brokers: e.Brokers(), Partitions: 8, Namespace: "t-crash", Logger: slog.New(slog.DiscardHandler)}
	cl := kafkatest.Client(t, cfg)
	if err := cl.Admin().EnsureTopics(context.Background(), topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	produceTokenized(t, cfg, n)
	g := newGenerateLike(t, cfg, slowWork)
	cc := kafka.ConsumerConfig{Group: "gen-crash", MaxInFlight: 24, SessionTimeout: 6 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	watch := watchOffsets(ctx, cl.Admin(), cc.Group)

	victimCfg := cfg
	victimCfg.ClientID = "victim"
	crash := crashMember(e, victimCfg.ClientID)
	// The victim gives up its partitions quickly once it has lost them (its deliveries never finish): only so
	// that the test ends soon; it commits nothing either way.
	victimCC := cc
	victimCC.RevokeTimeout, victimCC.DrainTimeout, victimCC.FinalCommitTimeout = time.Second, time.Second, time.Second
	victim := kafkatest.Client(t, victimCfg).NewConsumer(topics.TopicTokenized, victimCC)
	var handedMu sync.Mutex
	var handed []kafka.Message // what the victim was handed before it crashed
	var dead atomic.Bool
	victimCtx, stopVictim := context.WithCancel(ctx)
	defer stopVictim()
	victimDone := make(chan error, 1)
	go func() {
		victimDone <- g.member(victimCtx, victim, &dead, func(d *kafka.Delivery) {
			handedMu.Lock()
			defer handedMu.Unlock()
			if !dead.Load() {
				handed = append(handed, d.Message)
			}
		})
	}()
	// The survivor's session is long: a fresh join after the crash is refused (it could only be the victim's),
	// so a survivor whose heartbeats a loaded machine delays past a short session would be shut out for good.
	survivorCC := cc
	survivorCC.SessionTimeout = 45 * time.Second
	survivorDone := make(chan error, 1)
	go func() { survivorDone <- g.member(ctx, cl.NewConsumer(topics.TopicTokenized, survivorCC), nil, nil) }()

	g.waitAll(t, n/3, time.Minute)
	handedMu.Lock()
	dead.Store(true) // the process is gone: its work in flight never finishes, nothing more is handed to it
	handedMu.Unlock()
	crash()
	// What the group has committed now is all the victim ever commits: its window is every delivery it was
	// handed at or after those offsets.
	committed, err := cl.Admin().CommittedOffsets(ctx, cc.Group, topics.TopicTokenized)
	if err != nil {
		t.Fatal(err)
	}
	window := 0
	for _, m := range handed {
		if m.Offset >= committed[m.Partition] {
			window++
		}
	}
	g.waitAll(t, n, 2*time.Minute)
	stopVictim()
	if err := <-victimDone; err != nil {
		t.Logf("the crashed victim's Run: %v", err)
	}
	cancel()
	if err := <-survivorDone; err != nil {
		t.Error(err)
	}

	gens, distinct := g.counts()
	redone := gens - distinct
	t.Logf("crash: %d generations for %d prompts, %d redone, %d work items started; the crashed replica left %d handed-out deliveries uncommitted",
		gens, n, redone, g.started.Load(), window)
	if redone > window {
		t.Errorf("%d generations redone, more than the crashed replica's uncommitted window of %d", redone, window)
	}
	watch.check(t)
}

// TestConsumerSignalsRevokingThenLost: a member giving its partitions up (here on shutdown) closes its
// deliveries' Revoking at once, while it still waits for them, and Lost only once it has let them go.
func TestConsumerSignalsRevokingThenLost(t *testing.T) {
	cfg := kafkatest.Config(t, 1)
	cl := kafkatest.Client(t, cfg)
	produceN(t, cfg, 3)
	c := cl.NewConsumer(topics.TopicTokenized, kafka.ConsumerConfig{Group: "g", MaxInFlight: 8, DrainTimeout: 3 * time.Second,
		SessionTimeout: 6 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *kafka.Delivery, 3)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx, func(d *kafka.Delivery) { got <- d }) }()
	var ds []*kafka.Delivery
	for range 3 {
		select {
		case d := <-got:
			ds = append(ds, d)
		case <-time.After(60 * time.Second):
			t.Fatal("no delivery")
		}
	}
	select {
	case <-ds[0].Revoking():
		t.Fatal("revoking before anything was given up")
	default:
	}
	ds[0].Done()
	cancel()
	select {
	case <-ds[1].Revoking():
	case <-time.After(2 * time.Second): // well inside the drain: the member still holds its partition
		t.Fatal("Revoking not closed when the shutdown began")
	}
	select {
	case <-ds[1].Lost().Done():
		t.Fatal("Lost while the member still drains")
	default:
	}
	ds[1].Abandon() // what generate does with work that has not started
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case <-ds[2].Lost().Done():
	default:
		t.Fatal("Lost not closed after the member let its partitions go")
	}
	committed, err := cl.Admin().CommittedOffsets(context.Background(), "g", topics.TopicTokenized)
	if err != nil || committed[0] != 1 {
		t.Fatalf("committed %v, %v; want 1 (only the first delivery finished)", committed, err)
	}
}

// TestConsumerHandsOverFinishedWork: a member gives its partition up with the first record unfinished and
// the rest finished; the next member is handed only the unfinished one (the rest is named in the commit's
// metadata), on the embedded broker and on Apache Kafka.
func TestConsumerHandsOverFinishedWork(t *testing.T) {
	cfg := kafkatest.Config(t, 1)
	cl := kafkatest.Client(t, cfg)
	produceN(t, cfg, 10)
	cc := kafka.ConsumerConfig{Group: "g", MaxInFlight: 16, DrainTimeout: 500 * time.Millisecond, SessionTimeout: 6 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *kafka.Delivery, 10)
	ran := make(chan error, 1)
	go func() {
		ran <- cl.NewConsumer(topics.TopicTokenized, cc).Run(ctx, func(d *kafka.Delivery) { got <- d })
	}()
	for i := range 10 {
		select {
		case d := <-got:
			if i > 0 {
				d.Done() // offset 0 stays unfinished, holding the committed offset at 0
			}
		case <-time.After(60 * time.Second):
			t.Fatal("no delivery")
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	committed, err := cl.Admin().CommittedOffsets(context.Background(), "g", topics.TopicTokenized)
	if err != nil || committed[0] != 0 {
		t.Fatalf("committed %v, %v; want 0", committed, err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	second := make(chan *kafka.Delivery, 10)
	go func() {
		ran <- cl.NewConsumer(topics.TopicTokenized, cc).Run(ctx, func(d *kafka.Delivery) { second <- d; d.Done() })
	}()
	select {
	case d := <-second:
		if d.Message.Offset != 0 {
			t.Fatalf("the next owner got offset %d first, want 0", d.Message.Offset)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the next owner got nothing")
	}
	select {
	case d := <-second:
		t.Fatalf("offset %d handed out again although the previous owner finished it", d.Message.Offset)
	case <-time.After(2 * time.Second):
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if committed, err = cl.Admin().CommittedOffsets(context.Background(), "g", topics.TopicTokenized); err != nil || committed[0] != 10 {
		t.Fatalf("committed %v, %v; want 10", committed, err)
	}
}

// TestConsumerRefusesEagerGroup: a group whose member speaks only the eager "range" protocol (a replica of a
// draftflow build from before the cooperative consumer, played by a franz-go member with the range balancer) and
// a Consumer of this build cannot share it: Run fails promptly with an error that says why and what to do,
// instead of joining a group that can never agree.
func TestConsumerRefusesEagerGroup(t *testing.T) {
	cfg := kafkatest.Config(t, 2)
	cl := kafkatest.Client(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	joined := make(chan struct{}, 1)
	old, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumerGroup(cfg.Topic("mixed")),
		kgo.ConsumeTopics(cfg.Topic(topics.TopicTokenized)), kgo.Balancers(kgo.RangeBalancer()),
		kgo.SessionTimeout(6*time.Second), kgo.RebalanceTimeout(10*time.Second),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case joined <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	polling := make(chan struct{})
	go func() {
		defer close(polling)
		for ctx.Err() == nil {
			old.PollFetches(ctx)
		}
	}()
	defer func() {
		cancel()
		<-polling
		old.Close()
	}()
	select {
	case <-joined:
	case <-ctx.Done():
		t.Fatal("the eager member did not join")
	}
	start := time.Now()
	err = cl.NewConsumer(topics.TopicTokenized, kafka.ConsumerConfig{Group: "mixed", SessionTimeout: 6 * time.Second}).
		Run(ctx, func(d *kafka.Delivery) { d.Done() })
	if !errors.Is(err, kerr.InconsistentGroupProtocol) || !strings.Contains(err.Error(), "stop them first") {
		t.Fatalf("Run beside an eager member: %v, want INCONSISTENT_GROUP_PROTOCOL saying what to do", err)
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// TestConsumerCooperativeJoinMovesOnlyWhatMoves: a member owns 4 partitions and holds one unfinished delivery of
// each; a second member joins. Only the 2 partitions that move to it are revoked (their deliveries see Revoking
// and the member waits for them); the other 2 are never revoked, and their work goes on. Under the eager protocol
// of kafka-go every partition was revoked.
func TestConsumerCooperativeJoinMovesOnlyWhatMoves(t *testing.T) {
	cfg := kafkatest.Config(t, 4)
	cl := kafkatest.Client(t, cfg)
	produceTokenized(t, cfg, 200)
	cc := kafka.ConsumerConfig{Group: "coop", MaxInFlight: 256, SessionTimeout: 6 * time.Second, RevokeTimeout: 45 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var mu sync.Mutex
	held := map[int]*kafka.Delivery{} // the first delivery of each partition, left unfinished
	a := cl.NewConsumer(topics.TopicTokenized, cc)
	aDone := make(chan error, 1)
	go func() {
		aDone <- a.Run(ctx, func(d *kafka.Delivery) {
			mu.Lock()
			defer mu.Unlock()
			if held[d.Message.Partition] == nil {
				held[d.Message.Partition] = d
				return
			}
			d.Done()
		})
	}()
	testutil.WaitFor(t, time.Minute, "a delivery held on each of the 4 partitions", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 4 })

	b := cl.NewConsumer(topics.TopicTokenized, cc)
	bDone := make(chan error, 1)
	go func() { bDone <- b.Run(ctx, func(d *kafka.Delivery) { d.Done() }) }()
	revoking := func() (moving, kept []int) {
		mu.Lock()
		defer mu.Unlock()
		for p, d := range held {
			select {
			case <-d.Revoking():
				moving = append(moving, p)
			default:
				kept = append(kept, p)
			}
		}
		slices.Sort(moving)
		slices.Sort(kept)
		return moving, kept
	}
	// A partition revoked later than these is caught once the join has completed (below).
	testutil.WaitFor(t, time.Minute, "the join to revoke two partitions", func() bool { m, _ := revoking(); return len(m) >= 2 })
	moving, kept := revoking()
	if len(moving) != 2 || len(kept) != 2 {
		t.Fatalf("the join revoked partitions %v and kept %v; want 2 and 2", moving, kept)
	}
	for _, p := range moving {
		mu.Lock()
		held[p].Done() // the member lets the moving partitions go once their work is finished
		mu.Unlock()
	}
	testutil.WaitFor(t, time.Minute, "the second member to own 2 partitions", func() bool { return b.Assigned() == 2 && a.Assigned() == 2 })
	if m, _ := revoking(); !slices.Equal(m, moving) {
		t.Errorf("revoked %v after the join completed, want only %v", m, moving)
	}
	for _, p := range kept {
		mu.Lock()
		d := held[p]
		mu.Unlock()
		select {
		case <-d.Lost().Done():
			t.Errorf("partition %d lost although it never moved", p)
		default:
		}
		d.Done()
	}
	cancel()
	if err := <-aDone; err != nil {
		t.Error(err)
	}
	if err := <-bDone; err != nil {
		t.Error(err)
	}
}
