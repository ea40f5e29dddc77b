package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ConsumerConfig tunes a Consumer; zero values are documented defaults.
type ConsumerConfig struct {
	// Group is the consumer group id; replicas of a stage share it. Required. It is namespaced like topics.
	Group string
	// Namespace, when set, is the namespace the topic is read from instead of the Client's; the group stays in
	// the Client's Namespace. It lets a stage read another pipeline's
	// topic and write its own: re-tokenizing the prompts of namespace A for another model into namespace B.
	Namespace string
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
	// gives up before it commits what is finished and lets them go (default 20 s). The work still unfinished
	// then is abandoned (its offsets are not committed; the next owner does it again). Rebalances are
	// cooperative: only the partitions that move wait; every member goes on with the partitions it keeps, and
	// the moving partitions reach their new owner once their old one has let them go.
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

// handout is what the deliveries of one partition's ownership share: the signals of the partition being given
// up. A partition assigned again gets a new one.
type handout struct {
	revoking chan struct{}   // closed when the member starts giving the partition up
	revoked  bool            // revoking is closed (guarded by Consumer.mu)
	lost     context.Context // cancelled once the partition is gone
	lose     context.CancelFunc
}

func newHandout() *handout {
	lost, lose := context.WithCancel(context.Background())
	return &handout{revoking: make(chan struct{}), lost: lost, lose: lose}
}

// Revoking is closed when this member starts giving the delivery's partition up (a rebalance that moves it, or
// shutdown): it keeps the partition only while work already running finishes (RevokeTimeout, DrainTimeout).
// Work that has not started by then should not start: Abandon the delivery, and the partition's next owner does
// it, at no cost to anyone.
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
		d.c.freed.notify()
	})
}

// Abandon gives the delivery up without finishing it: its slot is freed, its offset is never committed by
// this consumer, and Kafka redelivers it after a restart or rebalance. Use it for work cut short by shutdown.
// Safe to call more than once, and after Done (then it does nothing).
func (d *Delivery) Abandon() {
	d.once.Do(func() {
		d.c.marks.Abandon(d.mark)
		<-d.c.slots
		d.c.freed.notify()
	})
}

// Where names the consumed message for logs and dead letters ("tokenized/3@1207").
func (d *Delivery) Where() string {
	return d.Message.Topic + "/" + strconv.Itoa(d.Message.Partition) + "@" + strconv.FormatInt(d.Message.Offset, 10)
}

// Consumer reads one topic as a member of a consumer group and commits per-partition watermarks.
//
// The group is run by franz-go with the cooperative-sticky assignor (KIP-429): a rebalance moves only the
// partitions that must move, and every member keeps working on the rest. The Consumer knows at every moment
// which partitions it owns. When a rebalance takes some away, it stops handing out their records, waits up to
// RevokeTimeout for their in-flight deliveries, commits their finished prefix (with the finished offsets after
// it, handover.go) and only then lets them go; their new owner starts from that commit. It commits only
// partitions it owns, so it never moves back the committed offset of a partition another member owns now.
// Every assignment and revocation is logged.
//
// The group speaks only "cooperative-sticky": a member of an older draftflow build (kafka-go's eager "range")
// cannot join a group of these members, nor these one of its; Run fails at once saying so.
type Consumer struct {
	cl    *Client
	cfg   Config
	cc    ConsumerConfig
	topic string
	marks *watermark
	slots chan struct{}
	freed notifier // a delivery finished or was abandoned

	mu       sync.Mutex
	owned    map[int]*handout       // the partitions this member owns now
	skip     map[int]map[int64]bool // per owned partition: offsets its previous owner finished (handover.go)
	stopping bool                   // Run is draining for shutdown: partitions assigned now are revoking at once

	commitMu sync.Mutex // serializes commits
	met      *plumbing
	lag      *lagGauge    // draftflow_consumer_lag of the partitions owned
	assigned atomic.Int32 // partitions owned now
	log      *slog.Logger
}

// NewConsumer returns a Consumer of the logical topic in group cc.Group: the topic in cc.Namespace when it is
// set, else namespaced like every topic; the group namespaced like topics (cc.Namespace does not move it).
func (cl *Client) NewConsumer(topic string, cc ConsumerConfig) *Consumer {
	c := cl.cfg
	if cc.Namespace != "" {
		topic = Config{Namespace: cc.Namespace}.Topic(topic)
	} else {
		topic = c.Topic(topic)
	}
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
		slots: make(chan struct{}, cc.MaxInFlight),
		owned: map[int]*handout{}, skip: map[int]map[int64]bool{},
		log: c.logger().With("topic", topic, "group", cc.Group)}
}

// Assigned returns how many partitions of its topic the consumer owns now (0 before the first assignment and
// after the last): a stage is ready to work once it owns some.
func (c *Consumer) Assigned() int { return int(c.assigned.Load()) }

// notifier wakes every goroutine waiting for a change (the consume loop for a free slot, drains for their
// partitions' deliveries): a waiter takes the channel before it checks its condition, so no change is missed.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next notify.
func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

// notify wakes the waiters.
func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// rebalanceTimeout is how long the coordinator waits for every member to rejoin on a rebalance: long enough
// for a member to drain the partitions it gives up, or, on shutdown, its whole in-flight window.
func (c *Consumer) rebalanceTimeout() time.Duration {
	return max(c.cc.RevokeTimeout, c.cc.DrainTimeout, c.cc.SessionTimeout) + c.cc.FinalCommitTimeout
}

// maxGroupFailures is how many group errors in a row (a join refused, a coordinator gone, each retried with
// backoff) Run outlasts before it gives up.
const maxGroupFailures = 120

// Run joins the group and hands each fetched record to handle until ctx is cancelled or the group fails for
// good. handle is called from Run's goroutine, one delivery at a time, in partition order; it may start
// concurrent work and return at once, as long as every delivery is eventually Done or Abandoned.
//
// On a rebalance that takes partitions away, the member stops handing out their records, waits up to
// RevokeTimeout for their in-flight deliveries, commits their finished prefix and lets them go, working on the
// partitions it keeps meanwhile. When ctx ends, Run stops fetching, waits up to DrainTimeout for in-flight
// deliveries (still owning its partitions), commits the finished prefix of every partition (retrying with
// backoff for up to FinalCommitTimeout), leaves the group and returns nil, or the error of that final commit if
// it never succeeded. A commit error while running is logged and retried at the next interval. Credentials the
// brokers refuse, and a group they will never accept, end Run with the error at once.
func (c *Consumer) Run(ctx context.Context, handle func(*Delivery)) error {
	cl, err := c.groupClient(ctx)
	if err != nil {
		return err
	}
	defer c.leave(cl)

	committing, stopCommitting := context.WithCancel(context.Background())
	committerDone := make(chan struct{})
	go func() {
		defer close(committerDone)
		t := time.NewTicker(c.cc.CommitInterval)
		defer t.Stop()
		for {
			select {
			case <-committing.Done():
				return
			case <-t.C:
				if err := c.commit(cl, c.ownedParts()); err != nil {
					c.log.Warn("commit failed; will retry", "err", err)
				}
			}
		}
	}()
	runErr := c.consume(ctx, cl, handle)
	stopCommitting()
	<-committerDone
	return errors.Join(runErr, c.shutdown(cl))
}

// groupClient returns the franz-go client of the group member: cooperative-sticky, no autocommit, the rebalance
// callbacks of this Consumer.
func (c *Consumer) groupClient(ctx context.Context) (*kgo.Client, error) {
	start := kgo.NewOffset().AtStart()
	if c.cc.StartFromLatest {
		start = kgo.NewOffset().AtEnd()
	}
	fetchMax := int32(c.cfg.maxMessageBytes() * 2)
	cl, err := c.cl.newFranz(ctx,
		kgo.WithLogger(franzLogger{c.log}),
		kgo.ConsumerGroup(c.cc.Group),
		kgo.ConsumeTopics(c.topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(c.cc.SessionTimeout),
		kgo.HeartbeatInterval(c.cc.SessionTimeout/5),
		kgo.RebalanceTimeout(c.rebalanceTimeout()),
		kgo.ConsumeResetOffset(start),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.FetchMaxBytes(fetchMax),
		kgo.FetchMaxPartitionBytes(fetchMax),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
			c.assign(cl, assigned[c.topic])
		}),
		kgo.OnOffsetsFetched(func(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
			c.handOver(resp)
			return nil
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, revoked map[string][]int32) {
			c.revoke(cl, revoked[c.topic])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			c.lose(lost[c.topic])
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka: join group %s: %w", c.cc.Group, err)
	}
	return cl, nil
}

// consume polls and hands out records until ctx ends (nil) or the group fails for good (the error).
func (c *Consumer) consume(ctx context.Context, cl *kgo.Client, handle func(*Delivery)) error {
	failures := 0
	for {
		for {
			freed := c.freed.wait()
			if len(c.slots) < cap(c.slots) {
				break
			}
			select {
			case <-freed:
			case <-ctx.Done():
				return nil
			}
		}
		fetches := cl.PollRecords(ctx, cap(c.slots)-len(c.slots))
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil // records polled and not handed out were never added: the next owner gets them
		}
		var fatal error
		fetches.EachError(func(topic string, partition int32, err error) {
			if fatal != nil || errors.Is(err, context.Canceled) {
				return
			}
			var gerr *kgo.ErrGroupSession
			if !errors.As(err, &gerr) {
				// A partition's fetch failed in a way franz-go does not retry by itself (it retries the rest).
				c.log.Warn("fetch failed", "partition", partition, "err", err)
				return
			}
			if aerr := c.cl.explain(ctx, err); IsAuthError(aerr) {
				fatal = fmt.Errorf("kafka: join group %s: %w", c.cc.Group, aerr)
				return
			}
			if errors.Is(err, kerr.InconsistentGroupProtocol) {
				fatal = fmt.Errorf("kafka: join group %s: %w (its members speak another assignment protocol: "+
					"replicas of a draftflow build from before the cooperative consumer (docs/changelog.md) rebalance eagerly "+
					"with \"range\" and cannot share a group with this build's; stop them first)", c.cc.Group, err)
				return
			}
			if errors.Is(err, kerr.InvalidSessionTimeout) || errors.Is(err, kerr.InvalidGroupID) ||
				errors.Is(err, kerr.GroupAuthorizationFailed) {
				fatal = fmt.Errorf("kafka: join group %s: %w", c.cc.Group, err)
				return
			}
			// Joining failed (coordinator moving, topic not served yet): franz-go backs off and joins again.
			if failures++; failures >= maxGroupFailures {
				fatal = fmt.Errorf("kafka: join group %s: %w", c.cc.Group, err)
				return
			}
			c.log.Info("the group session failed; rejoining", "err", err, "attempt", failures)
		})
		if fatal != nil {
			return fatal
		}
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				if d := c.deliver(r, p.HighWatermark); d != nil {
					failures = 0
					handle(d)
				}
			}
		})
	}
}

// deliver returns the Delivery of r, or nil when r is not handed out: its partition is being given up (the next
// owner gets it), or its previous owner finished it (handover).
func (c *Consumer) deliver(r *kgo.Record, highWater int64) *Delivery {
	part := int(r.Partition)
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.owned[part]
	if h == nil || h.revoked {
		return nil
	}
	c.slots <- struct{}{} // never blocks: consume polled at most the free slots
	c.met.consumedRecords.WithLabelValues(c.topic, c.cc.Group).Inc()
	c.lag.fetched(part, r.Offset, highWater)
	m := c.marks.Add(part, r.Offset)
	if c.skip[part][r.Offset] {
		c.marks.Done(m)
		<-c.slots
		c.met.handedOver.WithLabelValues(c.topic, c.cc.Group).Inc()
		return nil
	}
	return &Delivery{c: c, gen: h, mark: m,
		Message: Message{Topic: r.Topic, Partition: part, Offset: r.Offset, Key: r.Key, Value: r.Value, Time: r.Timestamp}}
}

// ownedParts returns the partitions owned now, sorted.
func (c *Consumer) ownedParts() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.owned))
}

// assign takes over newly assigned partitions: a fresh start at their committed offsets.
func (c *Consumer) assign(cl *kgo.Client, parts []int32) {
	c.mu.Lock()
	added := make([]int, 0, len(parts))
	for _, p := range parts {
		part := int(p)
		if c.owned[part] != nil {
			continue
		}
		c.marks.Forget(part)
		delete(c.skip, part)
		h := newHandout()
		if c.stopping {
			close(h.revoking)
			h.revoked = true
		}
		c.owned[part] = h
		added = append(added, part)
	}
	n := len(c.owned)
	all := slices.Sorted(maps.Keys(c.owned))
	c.mu.Unlock()
	slices.Sort(added)
	c.assigned.Store(int32(n))
	c.met.assignedPartitions.WithLabelValues(c.topic, c.cc.Group).Set(float64(n))
	c.met.rebalances.WithLabelValues(c.topic, c.cc.Group).Inc()
	member, gen := cl.GroupMetadata()
	level := slog.LevelInfo
	if len(added) == 0 {
		level = slog.LevelDebug // a generation that moved nothing to this member
	}
	c.log.Log(context.Background(), level, "partitions assigned", "partitions", added, "owned", all, "generation", gen, "member", member)
}

// handOver reads, from the committed offsets of the partitions just assigned, the finished offsets their
// previous owner named beyond each committed offset (handover.go): those records are not handed out again.
func (c *Consumer) handOver(resp *kmsg.OffsetFetchResponse) {
	skip := map[int]map[int64]bool{}
	add := func(partition int32, committed int64, meta *string, code int16) {
		if code != 0 || committed < 0 || meta == nil || *meta == "" {
			return
		}
		done, err := decodeDone(committed, *meta)
		if err != nil {
			c.log.Warn("the previous owner's finished offsets are unreadable; they will be done again", "partition", partition, "err", err)
			return
		}
		if len(done) > 0 {
			s := make(map[int64]bool, len(done))
			for _, off := range done {
				s[off] = true
			}
			skip[int(partition)] = s
		}
	}
	// One topic is consumed, so every partition in the answer is of it (OffsetFetch v10 names topics by id).
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			add(p.Partition, p.Offset, p.Metadata, p.ErrorCode)
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				add(p.Partition, p.Offset, p.Metadata, p.ErrorCode)
			}
		}
	}
	c.mu.Lock()
	n := 0
	for part, s := range skip {
		if c.owned[part] != nil {
			c.skip[part] = s
			n += len(s)
		}
	}
	c.mu.Unlock()
	if n > 0 {
		c.log.Info("records the previous owner finished after its committed offsets are skipped", "records", n)
	}
}

// partsOf converts franz-go's partition numbers.
func partsOf(ps []int32) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = int(p)
	}
	return out
}

// beginRevoke closes Revoking for the owned partitions of parts and returns them.
func (c *Consumer) beginRevoke(parts []int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, part := range parts {
		if h := c.owned[part]; h != nil {
			if !h.revoked {
				close(h.revoking)
				h.revoked = true
			}
			out = append(out, part)
		}
	}
	slices.Sort(out)
	return out
}

// release lets parts go: their marks are forgotten (what is unfinished is abandoned), their deliveries' Lost
// is cancelled. It returns how many deliveries were unfinished.
func (c *Consumer) release(parts []int) int {
	c.mu.Lock()
	abandoned := 0
	for _, part := range parts {
		h := c.owned[part]
		if h == nil {
			continue
		}
		abandoned += c.marks.Forget(part)
		h.lose()
		delete(c.owned, part)
		delete(c.skip, part)
	}
	n := len(c.owned)
	c.mu.Unlock()
	c.met.revokedAbandoned.WithLabelValues(c.topic, c.cc.Group).Add(float64(abandoned))
	c.lag.forget(parts)
	c.assigned.Store(int32(n))
	c.met.assignedPartitions.WithLabelValues(c.topic, c.cc.Group).Set(float64(n))
	return abandoned
}

// revoke gives partitions up in a rebalance (or as the group is left): it stops their hand-out, waits up to
// RevokeTimeout for their in-flight deliveries, commits their finished work and lets them go. franz-go lets the
// group move them only once it returns.
func (c *Consumer) revoke(cl *kgo.Client, revoked []int32) {
	parts := c.beginRevoke(partsOf(revoked))
	if len(parts) == 0 {
		return
	}
	start := time.Now()
	pending := c.drain(parts, c.cc.RevokeTimeout)
	if err := c.commit(cl, parts); err != nil {
		c.log.Warn("commit before giving partitions up failed; their finished work will be redone", "partitions", parts, "err", err)
	}
	abandoned := c.release(parts)
	c.log.Info("partitions revoked", "partitions", parts, "reason", "rebalance", "drained_in", time.Since(start).Round(time.Millisecond),
		"unfinished", pending, "abandoned", abandoned)
}

// lose drops partitions taken away without a chance to commit (the session expired, a fatal group error): their
// work still running is wasted; the next owner starts from the last commit.
func (c *Consumer) lose(lost []int32) {
	parts := c.beginRevoke(partsOf(lost))
	if len(parts) == 0 {
		return
	}
	abandoned := c.release(parts)
	c.log.Warn("partitions lost without a final commit; their uncommitted work will be done again", "partitions", parts,
		"unfinished", abandoned)
}

// shutdown, once Run stops consuming, drains every owned partition for up to DrainTimeout, commits its finished
// work (retrying for up to FinalCommitTimeout) and lets the partitions go. Its error is the final commit's.
func (c *Consumer) shutdown(cl *kgo.Client) error {
	c.mu.Lock()
	c.stopping = true
	all := slices.Sorted(maps.Keys(c.owned))
	c.mu.Unlock()
	parts := c.beginRevoke(all)
	if len(parts) == 0 {
		return nil
	}
	start := time.Now()
	pending := c.drain(parts, c.cc.DrainTimeout)
	err := c.finalCommit(cl, parts)
	abandoned := c.release(parts)
	c.log.Info("partitions revoked", "partitions", parts, "reason", "shutdown", "drained_in", time.Since(start).Round(time.Millisecond),
		"unfinished", pending, "abandoned", abandoned)
	if err != nil {
		return fmt.Errorf("kafka: final commit of %s for group %s: %w", c.topic, c.cc.Group, err)
	}
	return nil
}

// leave leaves the group (the other members take the partitions over at once) and closes the client.
func (c *Consumer) leave(cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.LeaveGroupContext(ctx); err != nil {
		c.log.Info("leaving the group failed; the coordinator drops this member when its session times out", "err", err)
	}
	cl.Close()
}

// drain waits up to d for the in-flight deliveries of parts to finish and returns how many are still pending.
func (c *Consumer) drain(parts []int, d time.Duration) int {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		freed := c.freed.wait()
		n := c.marks.PendingOf(parts)
		if n == 0 {
			return 0
		}
		select {
		case <-freed:
		case <-deadline.C:
			return n
		}
	}
}

// finalCommit commits the finished prefix of parts, retrying with exponential backoff until it succeeds or
// FinalCommitTimeout has passed; it returns the last error then.
func (c *Consumer) finalCommit(cl *kgo.Client, parts []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cc.FinalCommitTimeout)
	defer cancel()
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(0))
	attempt := 0
	var last error
	err := backoff.Retry(func() error {
		attempt++
		err := c.commitCtx(ctx, cl, parts)
		if err != nil {
			c.log.Warn("final commit failed; retrying", "attempt", attempt, "err", err)
			last = err
			if errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) {
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
	c.log.Error("final commit failed for good; finished records will be redelivered", "attempts", attempt, "err", last)
	return last
}

// commit commits the finished prefix of every partition of parts that advanced (30 s bound).
func (c *Consumer) commit(cl *kgo.Client, parts []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.commitCtx(ctx, cl, parts)
}

// commitCtx commits, in the member's group session, the finished prefix of every partition of parts that
// advanced, each with the finished offsets after it in the commit's metadata. A failure is counted and
// returned, and the offsets stay due for the next commit.
func (c *Consumer) commitCtx(ctx context.Context, cl *kgo.Client, parts []int) error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	offsets, done, changed := c.marks.Commit(parts)
	if !changed {
		return nil
	}
	if err := c.commitWithDone(ctx, cl, offsets, done); err != nil {
		for part, off := range offsets {
			c.marks.Retreat(part, off-1)
		}
		c.met.commitErrors.WithLabelValues(c.topic, c.cc.Group).Inc()
		return c.cl.explain(ctx, err)
	}
	for part, off := range offsets {
		c.met.committedOffset.WithLabelValues(c.topic, c.cc.Group, strconv.Itoa(part)).Set(float64(off))
	}
	c.lag.commit(offsets)
	return nil
}
