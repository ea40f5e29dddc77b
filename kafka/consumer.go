package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
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
	// commits what is finished and returns (default 30 s). Unfinished work is redelivered later.
	DrainTimeout time.Duration
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
	mark    Mark
	once    sync.Once
}

// Done marks the delivery finished. Safe to call more than once; only the first call counts.
func (d *Delivery) Done() {
	d.once.Do(func() {
		d.c.marks.Done(d.mark)
		<-d.c.slots
		d.c.wg.Done()
	})
}

// Abandon gives the delivery up without finishing it: its slot is freed, its offset is never committed by
// this consumer, and Kafka redelivers it after a restart or rebalance. Use it for work cut short by shutdown.
// Safe to call more than once, and after Done (then it does nothing).
func (d *Delivery) Abandon() {
	d.once.Do(func() {
		<-d.c.slots
		d.c.wg.Done()
	})
}

// Where names the consumed message for logs and dead letters ("tokenized/3@1207").
func (d *Delivery) Where() string {
	return d.Message.Topic + "/" + strconv.Itoa(d.Message.Partition) + "@" + strconv.FormatInt(d.Message.Offset, 10)
}

// Consumer reads one topic as a member of a consumer group and commits per-partition watermarks.
type Consumer struct {
	cfg   Config
	cc    ConsumerConfig
	topic string
	r     *kafkago.Reader
	marks *Watermark
	slots chan struct{}
	wg    sync.WaitGroup
}

// NewConsumer returns a Consumer of the logical topic in group cc.Group.
func (c Config) NewConsumer(topic string, cc ConsumerConfig) *Consumer {
	topic = c.Topic(topic)
	cc.Group = c.Topic(cc.Group) // groups are namespaced like topics
	if cc.MaxInFlight <= 0 {
		cc.MaxInFlight = 1024
	}
	if cc.CommitInterval <= 0 {
		cc.CommitInterval = 200 * time.Millisecond
	}
	if cc.DrainTimeout <= 0 {
		cc.DrainTimeout = 30 * time.Second
	}
	if cc.SessionTimeout <= 0 {
		cc.SessionTimeout = 10 * time.Second
	}
	if cc.FinalCommitTimeout <= 0 {
		cc.FinalCommitTimeout = 15 * time.Second
	}
	start := kafkago.FirstOffset
	if cc.StartFromLatest {
		start = kafkago.LastOffset
	}
	log := c.logger()
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers:           c.Brokers,
		GroupID:           cc.Group,
		Topic:             topic,
		Dialer:            c.dialer(),
		MinBytes:          1,
		MaxBytes:          c.maxMessageBytes() * 2,
		MaxWait:           250 * time.Millisecond,
		ReadBatchTimeout:  2 * time.Second,
		CommitInterval:    0, // synchronous commits: errors reach us
		StartOffset:       start,
		SessionTimeout:    cc.SessionTimeout,
		HeartbeatInterval: cc.SessionTimeout / 5,
		RebalanceTimeout:  cc.SessionTimeout,
		JoinGroupBackoff:  500 * time.Millisecond,
		ReadBackoffMin:    50 * time.Millisecond,
		ReadBackoffMax:    500 * time.Millisecond,
		ErrorLogger: kafkago.LoggerFunc(func(msg string, args ...any) {
			log.Debug(fmt.Sprintf(msg, args...), "topic", topic, "group", cc.Group)
		}),
	})
	return &Consumer{cfg: c, cc: cc, topic: topic, r: r, marks: NewWatermark(), slots: make(chan struct{}, cc.MaxInFlight)}
}

// Run fetches records and hands each to handle until ctx is cancelled or a fetch fails for good. handle is
// called from Run's goroutine, one delivery at a time, in partition order; it may start concurrent work and
// return at once, as long as every delivery is eventually Done. When ctx ends, Run stops fetching, waits up to
// DrainTimeout for in-flight deliveries, commits the finished prefix of every partition (retrying with backoff
// for up to FinalCommitTimeout), closes the reader and returns nil, or the error of that final commit if it
// never succeeded. A commit error while running is logged and retried at the next interval.
func (c *Consumer) Run(ctx context.Context, handle func(*Delivery)) error {
	log := c.cfg.logger().With("topic", c.topic, "group", c.cc.Group)
	commitCtx, stopCommits := context.WithCancel(context.Background())
	committerDone := make(chan struct{})
	go func() {
		defer close(committerDone)
		t := time.NewTicker(c.cc.CommitInterval)
		defer t.Stop()
		for {
			select {
			case <-commitCtx.Done():
				return
			case <-t.C:
				if err := c.commit(commitCtx); err != nil {
					log.Warn("commit failed; will retry", "err", err)
				}
			}
		}
	}()

	var runErr error
	for {
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		m, err := c.r.FetchMessage(ctx)
		if err != nil {
			<-c.slots
			var kerr kafkago.Error
			if ctx.Err() == nil && errors.As(err, &kerr) && kerr.Temporary() {
				// A partition moving or not yet served (NOT_LEADER_FOR_PARTITION right after a topic is
				// created, a leader election): kafka-go's partition reader keeps retrying; so do we.
				log.Info("fetch failed; retrying", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(250 * time.Millisecond):
				}
				continue
			}
			if ctx.Err() == nil && !errors.Is(err, io.EOF) {
				runErr = fmt.Errorf("kafka: fetch %s: %w", c.topic, err)
			}
			break
		}
		consumedRecords.WithLabelValues(c.topic, c.cc.Group).Inc()
		d := &Delivery{Message: Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Time: m.Time}, c: c, mark: c.marks.Add(m.Partition, m.Offset)}
		c.wg.Add(1)
		handle(d)
	}

	// Drain: wait for in-flight work, bounded.
	drained := make(chan struct{})
	go func() { c.wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(c.cc.DrainTimeout):
		log.Warn("drain timeout: unfinished deliveries will be redelivered", "pending", c.marks.Pending())
	}
	stopCommits()
	<-committerDone
	cerr := c.finalCommit(log)
	if err := c.r.Close(); err != nil && runErr == nil {
		log.Debug("close reader", "err", err)
	}
	if runErr == nil && cerr != nil {
		runErr = fmt.Errorf("kafka: final commit of %s for group %s: %w", c.topic, c.cc.Group, cerr)
	}
	return runErr
}

// finalCommit commits the finished prefix of every partition, retrying with exponential backoff until it
// succeeds or FinalCommitTimeout has passed; it returns the last error then.
func (c *Consumer) finalCommit(log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cc.FinalCommitTimeout)
	defer cancel()
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(0))
	attempt := 0
	var last error // the last failure, preferring the broker's answer to a timeout
	err := backoff.Retry(func() error {
		attempt++
		// Each attempt leaves time for another (kafka-go waits for a group generation and retries inside).
		actx, acancel := context.WithTimeout(ctx, max(c.cc.FinalCommitTimeout/3, time.Second))
		defer acancel()
		err := c.commit(actx)
		if err != nil {
			log.Warn("final commit failed; retrying", "attempt", attempt, "err", err)
			if last == nil || !errors.Is(err, context.DeadlineExceeded) {
				last = err
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

// commit commits the finished prefix of every partition that advanced. A failure is counted and returned,
// and the offsets stay due for the next commit.
func (c *Consumer) commit(ctx context.Context) error {
	adv := c.marks.Advance()
	if len(adv) == 0 {
		return nil
	}
	msgs := make([]kafkago.Message, 0, len(adv))
	for part, off := range adv {
		msgs = append(msgs, kafkago.Message{Topic: c.topic, Partition: part, Offset: off})
	}
	if err := c.r.CommitMessages(ctx, msgs...); err != nil {
		for part, off := range adv {
			c.marks.Retreat(part, off)
		}
		commitErrors.WithLabelValues(c.topic, c.cc.Group).Inc()
		return err
	}
	for part, off := range adv {
		committedOffset.WithLabelValues(c.topic, c.cc.Group, strconv.Itoa(part)).Set(float64(off + 1))
	}
	return nil
}

// Lag returns the reader's current lag estimate (messages behind the end of the partitions it reads).
func (c *Consumer) Lag() int64 { return c.r.Stats().Lag }
