package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	kafkago "github.com/segmentio/kafka-go"
)

// ConsumerConfig tunes a Consumer; zero values are documented defaults.
type ConsumerConfig struct {
	// Group is the consumer group id; replicas of a stage share it. Required. It is namespaced like topics.
	Group string
	// MaxInFlight bounds deliveries handed out and not yet Done (default 1024). Fetching pauses at the bound.
	MaxInFlight int
	// CommitInterval is how often finished offsets are committed (default 200 ms). Commits are synchronous, so
	// their errors are seen and retried.
	CommitInterval time.Duration
	// DrainTimeout is how long Run waits, after ctx is cancelled, for in-flight deliveries to finish before it
	// commits what is finished, leaves the group and returns (default 30 s). Unfinished work is redelivered to
	// the member that takes the partition over.
	DrainTimeout time.Duration
	// RevokeTimeout is how long, on a rebalance, the member waits for in-flight deliveries of the partitions it
	// gives up before it commits what is finished and rejoins (default 20 s). The work still unfinished then is
	// abandoned (its offsets are not committed; the next owner does it again). Every member of the group waits
	// for the slowest one during a rebalance (kafka-go rebalances eagerly), so this bounds the stall.
	RevokeTimeout time.Duration
	// FinalCommitTimeout bounds the commit of the finished offsets when Run stops, all retries included
	// (default 15 s). A failed attempt is logged and retried with backoff; if none succeeds, Run returns the error.
	FinalCommitTimeout time.Duration
	// SessionTimeout of the group membership (default 10 s): how fast a dead replica's partitions move.
	SessionTimeout time.Duration
	// StartFromLatest makes a new group start at the end of the topic instead of the beginning.
	StartFromLatest bool
}

// Message is one consumed Kafka record.
type Message struct {
	// Topic is the physical topic (namespace included).
	Topic     string
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
	// Time is the record's timestamp.
	Time time.Time
}

// Delivery is one consumed record. The handler must call Done exactly once, after the work it started is
// durable (usually from a Producer's done callback); only then can the offset be committed.
type Delivery struct {
	// Message is the consumed record.
	Message Message
	c       *Consumer
	mark    mark
	once    sync.Once
	gen     *handout
}

// handout is what the deliveries of one generation share: the signals of its partitions being given up.
type handout struct {
	revoking chan struct{}
	lost     context.Context // cancelled once the partitions are gone
}

// Revoking is closed when this member starts giving the delivery's partition up (a rebalance, or shutdown): it
// keeps the partition only while work already running finishes (RevokeTimeout, DrainTimeout). Work that has
// not started by then should not start: Abandon the delivery, and the partition's next owner does it, at no
// cost to anyone.
func (d *Delivery) Revoking() <-chan struct{} {
	if d.gen == nil {
		return nil // a Delivery made outside a Consumer (tests): never
	}
	return d.gen.revoking
}

// Lost is a context cancelled when the partition is gone: the drain ended, what was finished is committed, and
// the next owner does the rest again from the committed offset. Work still running for the delivery is wasted
// from here on; stop it (context.AfterFunc(d.Lost(), cancel) costs no goroutine) and Abandon the delivery.
func (d *Delivery) Lost() context.Context {
	if d.gen == nil {
		return context.Background() // a Delivery made outside a Consumer (tests): never
	}
	return d.gen.lost
}

// Done marks the delivery finished. Safe to call more than once; only the first call counts. A delivery of a
// partition this member gave up in the meantime is finished too late to be committed: its partition's new
// owner does it again, and the sink drops the duplicate.
func (d *Delivery) Done() {
	d.once.Do(func() {
		d.c.marks.Done(d.mark)
		<-d.c.slots
		d.c.signal()
	})
}

// Abandon gives the delivery up without finishing it: its slot is freed, its offset is never committed by
// this consumer, and Kafka redelivers it after a restart or rebalance. Use it for work cut short by shutdown.
// Safe to call more than once, and after Done (then it does nothing).
func (d *Delivery) Abandon() {
	d.once.Do(func() {
		d.c.marks.Abandon(d.mark)
		<-d.c.slots
		d.c.signal()
	})
}

// Where names the consumed message for logs and dead letters ("tokenized/3@1207").
func (d *Delivery) Where() string {
	return d.Message.Topic + "/" + strconv.Itoa(d.Message.Partition) + "@" + strconv.FormatInt(d.Message.Offset, 10)
}

// Consumer reads one topic as a member of a consumer group and commits per-partition watermarks.
//
// It is built on kafka-go's consumer-group generation API, so it knows at every moment which partitions it
// owns: each group generation assigns it a set of partitions, and a rebalance ends the generation. The
// Consumer then stops fetching, waits up to RevokeTimeout for the in-flight deliveries (heartbeating
// meanwhile, so the coordinator keeps it), commits their finished prefix through that generation and only then
// rejoins. It commits only partitions of its current generation, so a member can never move back the
// committed offset of a partition another member owns now: the broker refuses commits of an older
// generation. Every assignment and revocation is logged.
type Consumer struct {
	cl    *Client
	cfg   Config
	cc    ConsumerConfig
	topic string
	marks *watermark
	slots chan struct{}
	wake  chan struct{} // a delivery finished or was abandoned

	commitMu sync.Mutex // serializes commits
	met      *plumbing
	lag      *lagGauge    // draftflow_consumer_lag of the partitions owned
	assigned atomic.Int32 // partitions owned in the current generation
}

// NewConsumer returns a Consumer of the logical topic in group cc.Group: Config.InputTopic of topic, the group
// namespaced like topics (InputNamespace does not move it).
func (cl *Client) NewConsumer(topic string, cc ConsumerConfig) *Consumer {
	c := cl.cfg
	topic = c.InputTopic(topic)
	cc.Group = c.Topic(cc.Group)
	if cc.MaxInFlight <= 0 {
		cc.MaxInFlight = 1024
	}
	if cc.CommitInterval <= 0 {
		cc.CommitInterval = 200 * time.Millisecond
	}
	if cc.DrainTimeout <= 0 {
		cc.DrainTimeout = 30 * time.Second
	}
	if cc.RevokeTimeout <= 0 {
		cc.RevokeTimeout = 20 * time.Second
	}
	if cc.SessionTimeout <= 0 {
		cc.SessionTimeout = 10 * time.Second
	}
	if cc.FinalCommitTimeout <= 0 {
		cc.FinalCommitTimeout = 15 * time.Second
	}
	met := cl.met
	return &Consumer{cl: cl, cfg: c, cc: cc, topic: topic, marks: newWatermark(), met: met, lag: newLagGauge(met, topic, cc.Group),
		slots: make(chan struct{}, cc.MaxInFlight), wake: make(chan struct{}, 1)}
}

// Assigned returns how many partitions of its topic the consumer owns in the current group generation (0
// between generations and before the first): a stage is ready to work once it owns some.
func (c *Consumer) Assigned() int { return int(c.assigned.Load()) }

func (c *Consumer) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// rebalanceTimeout is how long the coordinator waits for every member to rejoin on a rebalance: long enough
// for a member to drain its revoked partitions, or, on shutdown, its whole in-flight window.
func (c *Consumer) rebalanceTimeout() time.Duration {
	return max(c.cc.RevokeTimeout, c.cc.DrainTimeout, c.cc.SessionTimeout) + c.cc.FinalCommitTimeout
}

// Run joins the group and hands each fetched record to handle until ctx is cancelled or the group fails for
// good. handle is called from Run's goroutine, one delivery at a time, in partition order; it may start
// concurrent work and return at once, as long as every delivery is eventually Done or Abandoned.
//
// On a rebalance Run stops fetching, waits up to RevokeTimeout for in-flight deliveries, commits the finished
// prefix of every partition it owned and rejoins. When ctx ends, Run stops fetching, waits up to DrainTimeout
// for in-flight deliveries (still owning its partitions), commits the finished prefix of every partition
// (retrying with backoff for up to FinalCommitTimeout), leaves the group and returns nil, or the error of that
// final commit if it never succeeded. A commit error while running is logged and retried at the next interval.
func (c *Consumer) Run(ctx context.Context, handle func(*Delivery)) error {
	log := c.cfg.logger().With("topic", c.topic, "group", c.cc.Group)
	start := kafkago.FirstOffset
	if c.cc.StartFromLatest {
		start = kafkago.LastOffset
	}
	dialer, err := c.cl.dialer()
	if err != nil {
		return err
	}
	group, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{
		ID:                c.cc.Group,
		Brokers:           c.cfg.Brokers,
		Dialer:            dialer,
		Topics:            []string{c.topic},
		GroupBalancers:    []kafkago.GroupBalancer{kafkago.RangeGroupBalancer{}},
		HeartbeatInterval: c.cc.SessionTimeout / 5,
		SessionTimeout:    c.cc.SessionTimeout,
		RebalanceTimeout:  c.rebalanceTimeout(),
		JoinGroupBackoff:  500 * time.Millisecond,
		StartOffset:       start,
		Timeout:           10 * time.Second,
		ErrorLogger: kafkago.LoggerFunc(func(msg string, args ...any) {
			log.Debug(fmt.Sprintf(msg, args...))
		}),
	})
	if err != nil {
		return fmt.Errorf("kafka: consumer group %s: %w", c.cc.Group, err)
	}
	// leave closes the group: kafka-go ends the generation, waits for runGeneration to release it (after the
	// final commit) and sends LeaveGroup, so the other members take the partitions over at once.
	var leaveOnce sync.Once
	left := make(chan struct{})
	leave := func() {
		leaveOnce.Do(func() { go func() { group.Close(); close(left) }() })
	}
	defer func() { leave(); <-left }()

	var runErr error
	failures := 0
	for ctx.Err() == nil {
		gen, err := group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafkago.ErrGroupClosed) {
				break
			}
			// Credentials the broker refuses: retrying cannot help, so the stage stops with an error naming them.
			if aerr := c.cl.explain(ctx, err); IsAuthError(aerr) {
				runErr = fmt.Errorf("kafka: join group %s: %w", c.cc.Group, aerr)
				break
			}
			// A group the broker will never accept: give up at once.
			if errors.Is(err, kafkago.InvalidSessionTimeout) || errors.Is(err, kafkago.InvalidGroupId) ||
				errors.Is(err, kafkago.GroupAuthorizationFailed) || errors.Is(err, kafkago.InconsistentGroupProtocol) {
				runErr = fmt.Errorf("kafka: join group %s: %w", c.cc.Group, err)
				break
			}
			// Joining failed (coordinator moving, topic not served yet, a rebalance racing the join): kafka-go
			// backs off and joins again. Give up only after a long run of failures.
			failures++
			if failures >= 120 {
				runErr = fmt.Errorf("kafka: join group %s: %w", c.cc.Group, err)
				break
			}
			log.Info("joining the group failed; retrying", "err", err, "attempt", failures)
			continue
		}
		failures = 0
		if err := c.runGeneration(ctx, gen, handle, leave, log); err != nil {
			runErr = err
			break
		}
	}
	// Deliveries of partitions this member no longer owns may still be running: they finish into nothing.
	return runErr
}

// runGeneration consumes the partitions one generation assigns until the generation ends (a rebalance) or ctx
// does (shutdown); then it drains, commits through the generation and returns, which lets kafka-go rejoin or
// leave. Its error is that of the final commit on shutdown.
func (c *Consumer) runGeneration(ctx context.Context, gen *kafkago.Generation, handle func(*Delivery), leave func(), log *slog.Logger) error {
	assigned := gen.Assignments[c.topic]
	parts := make([]int, len(assigned))
	for i, a := range assigned {
		parts[i] = a.ID
	}
	slices.Sort(parts)
	log = log.With("generation", gen.ID, "member", gen.MemberID)
	log.Info("partitions assigned", "partitions", parts)
	c.met.assignedPartitions.WithLabelValues(c.topic, c.cc.Group).Set(float64(len(parts)))
	c.assigned.Store(int32(len(parts)))
	c.met.rebalances.WithLabelValues(c.topic, c.cc.Group).Inc()

	// The generation's context ends on a rebalance; the function holds the generation (and so its coordinator
	// connection, through which we commit) until it returns.
	genCtx := make(chan context.Context, 1)
	release := make(chan struct{})
	gen.Start(func(gctx context.Context) {
		genCtx <- gctx
		<-release
	})
	gctx := <-genCtx
	defer close(release)
	// awaitLeave, after leave, holds the generation until kafka-go has seen the group closed (it then ends the
	// generation): released earlier, kafka-go would take the generation's end for a rebalance and join once more,
	// costing every other member a rebalance.
	awaitLeave := func() {
		select {
		case <-gctx.Done():
		case <-time.After(10 * time.Second):
		}
	}

	for _, p := range parts {
		c.marks.Forget(p) // a fresh start at the committed offset
	}
	// What the previous owner finished beyond its committed offsets is not handed out again (handover.go).
	starts := make(map[int]int64, len(assigned))
	for _, a := range assigned {
		starts[a.ID] = a.Offset
	}
	skip, herr := c.handedOver(gctx, starts)
	if herr != nil {
		log.Warn("reading what the previous owner finished failed; it will be done again", "err", herr)
	}
	if n := countSkips(skip); n > 0 {
		log.Info("records the previous owner finished after its committed offsets are skipped", "records", n)
	}
	fetchCtx, stopFetch := context.WithCancel(gctx)
	stopOnShutdown := context.AfterFunc(ctx, stopFetch)
	defer stopOnShutdown()
	type fetched struct {
		m   kafkago.Message
		err error
	}
	msgs := make(chan fetched)
	var fetchers sync.WaitGroup
	for _, a := range assigned {
		fetchers.Add(1)
		go func(a kafkago.PartitionAssignment) {
			defer fetchers.Done()
			dialer, err := c.cl.dialer() // the group's worked, so this one does too (unless a file vanished)
			if err != nil {
				select {
				case msgs <- fetched{err: err}:
				case <-fetchCtx.Done():
				}
				return
			}
			r := kafkago.NewReader(kafkago.ReaderConfig{
				Brokers:          c.cfg.Brokers,
				Topic:            c.topic,
				Partition:        a.ID,
				Dialer:           dialer,
				MinBytes:         1,
				MaxBytes:         c.cfg.maxMessageBytes() * 2,
				MaxWait:          250 * time.Millisecond,
				ReadBatchTimeout: 2 * time.Second,
				ReadBackoffMin:   50 * time.Millisecond,
				ReadBackoffMax:   500 * time.Millisecond,
				ErrorLogger: kafkago.LoggerFunc(func(msg string, args ...any) {
					log.Debug(fmt.Sprintf(msg, args...), "partition", a.ID)
				}),
			})
			defer r.Close()
			if err := r.SetOffset(a.Offset); err != nil {
				select {
				case msgs <- fetched{err: err}:
				case <-fetchCtx.Done():
				}
				return
			}
			for {
				m, err := r.FetchMessage(fetchCtx)
				if fetchCtx.Err() != nil {
					return
				}
				if err != nil {
					var kerr kafkago.Error
					if errors.As(err, &kerr) && kerr.Temporary() {
						// A partition moving or not yet served (NOT_LEADER_FOR_PARTITION right after a topic is
						// created, a leader election): retry.
						log.Info("fetch failed; retrying", "partition", a.ID, "err", err)
						select {
						case <-fetchCtx.Done():
							return
						case <-time.After(250 * time.Millisecond):
						}
						continue
					}
				}
				select {
				case msgs <- fetched{m: m, err: err}:
				case <-fetchCtx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}(a)
	}

	committerDone := make(chan struct{})
	go func() {
		defer close(committerDone)
		t := time.NewTicker(c.cc.CommitInterval)
		defer t.Stop()
		for {
			select {
			case <-fetchCtx.Done():
				return
			case <-t.C:
				if err := c.commit(gen, parts); err != nil {
					log.Warn("commit failed; will retry", "err", err)
				}
			}
		}
	}()

	// Hand out deliveries until the generation or the run ends.
	lost, loseAll := context.WithCancel(context.Background())
	hand := &handout{revoking: make(chan struct{}), lost: lost}
	defer loseAll()
	var fetchErr error
loop:
	for {
		select {
		case c.slots <- struct{}{}:
		case <-fetchCtx.Done():
			break loop
		}
		var f fetched
		select {
		case f = <-msgs:
		case <-fetchCtx.Done():
			<-c.slots
			break loop
		}
		if f.err != nil {
			<-c.slots
			fetchErr = f.err
			log.Warn("fetch failed; rejoining the group", "err", f.err)
			stopFetch()
			break
		}
		c.met.consumedRecords.WithLabelValues(c.topic, c.cc.Group).Inc()
		m := f.m
		c.lag.fetched(m.Partition, m.Offset, m.HighWaterMark)
		if skip[m.Partition][m.Offset] {
			c.marks.Done(c.marks.Add(m.Partition, m.Offset))
			<-c.slots
			c.met.handedOver.WithLabelValues(c.topic, c.cc.Group).Inc()
			continue
		}
		d := &Delivery{c: c, gen: hand, mark: c.marks.Add(m.Partition, m.Offset),
			Message: Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Time: m.Time}}
		handle(d)
	}
	stopFetch()
	close(hand.revoking)
	fetchers.Wait()
	<-committerDone

	shutdown := ctx.Err() != nil
	wait := c.cc.RevokeTimeout
	why := "rebalance"
	if shutdown {
		wait, why = c.cc.DrainTimeout, "shutdown"
		leave() // no rejoin after this generation
	} else if fetchErr != nil {
		why = "fetch error"
	}
	// Keep the membership alive while draining: kafka-go stops heartbeating when the generation ends, and a
	// member silent for SessionTimeout is dropped (its partitions then move before their work is committed).
	hbCtx, stopHB := context.WithCancel(context.Background())
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); c.heartbeat(hbCtx, gen) }()
	drainStart := time.Now()
	pending := c.drain(parts, wait)
	stopHB()
	<-hbDone
	var err error
	if shutdown {
		err = c.finalCommit(gen, parts, log)
	} else if cerr := c.commit(gen, parts); cerr != nil {
		log.Warn("commit before giving partitions up failed; their finished work will be redone", "err", cerr)
	}
	abandoned := 0
	for _, p := range parts {
		abandoned += c.marks.Forget(p)
	}
	c.met.revokedAbandoned.WithLabelValues(c.topic, c.cc.Group).Add(float64(abandoned))
	c.lag.forget(parts)
	c.met.assignedPartitions.WithLabelValues(c.topic, c.cc.Group).Set(0)
	c.assigned.Store(0)
	log.Info("partitions revoked", "partitions", parts, "reason", why, "drained_in", time.Since(drainStart).Round(time.Millisecond),
		"unfinished", pending, "abandoned", abandoned)
	if shutdown {
		awaitLeave()
	}
	if err != nil {
		return fmt.Errorf("kafka: final commit of %s for group %s: %w", c.topic, c.cc.Group, err)
	}
	return nil
}

// drain waits up to d for the in-flight deliveries of parts to finish and returns how many are still pending.
func (c *Consumer) drain(parts []int, d time.Duration) int {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		n := c.marks.PendingOf(parts)
		if n == 0 {
			return 0
		}
		select {
		case <-c.wake:
		case <-deadline.C:
			return n
		}
	}
}

// heartbeat keeps the member of gen alive until ctx ends. The coordinator answers REBALANCE_IN_PROGRESS while
// a rebalance waits for this member; that answer still counts as a heartbeat.
func (c *Consumer) heartbeat(ctx context.Context, gen *kafkago.Generation) {
	client, err := c.cl.adminClient()
	if err != nil {
		return // the group's own heartbeat client uses the same settings: it would not have joined
	}
	t := time.NewTicker(max(c.cc.SessionTimeout/5, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			hctx, cancel := context.WithTimeout(ctx, c.cc.SessionTimeout/2)
			_, _ = client.Heartbeat(hctx, &kafkago.HeartbeatRequest{GroupID: gen.GroupID, GenerationID: gen.ID, MemberID: gen.MemberID})
			cancel()
		}
	}
}

// finalCommit commits the finished prefix of parts, retrying with exponential backoff until it succeeds or
// FinalCommitTimeout has passed; it returns the last error then.
func (c *Consumer) finalCommit(gen *kafkago.Generation, parts []int, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cc.FinalCommitTimeout)
	defer cancel()
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(0))
	attempt := 0
	var last error
	err := backoff.Retry(func() error {
		attempt++
		err := c.commit(gen, parts)
		if err != nil {
			log.Warn("final commit failed; retrying", "attempt", attempt, "err", err)
			last = err
			if errors.Is(err, kafkago.IllegalGeneration) || errors.Is(err, kafkago.UnknownMemberId) {
				return backoff.Permanent(err) // the partitions have moved on: nothing of ours to commit
			}
		}
		return err
	}, backoff.WithContext(b, ctx))
	if err == nil {
		return nil
	}
	if last == nil {
		last = err
	}
	log.Error("final commit failed for good; finished records will be redelivered", "attempts", attempt, "err", last)
	return last
}

// commit commits, through gen, the finished prefix of every partition of parts that advanced. A failure is
// counted and returned, and the offsets stay due for the next commit.
func (c *Consumer) commit(gen *kafkago.Generation, parts []int) error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	offsets, done, changed := c.marks.Commit(parts)
	if !changed {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.commitWithDone(ctx, gen, offsets, done); err != nil {
		for part, off := range offsets {
			c.marks.Retreat(part, off-1)
		}
		c.met.commitErrors.WithLabelValues(c.topic, c.cc.Group).Inc()
		return err
	}
	for part, off := range offsets {
		c.met.committedOffset.WithLabelValues(c.topic, c.cc.Group, strconv.Itoa(part)).Set(float64(off))
	}
	c.lag.commit(offsets)
	return nil
}
