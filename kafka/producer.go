package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/draftflow/draftflow/internal/background"
)

// ProducerConfig tunes a Producer; zero values are documented defaults.
type ProducerConfig struct {
	// BatchTimeout is how long a partition's batch waits for more records before it is sent (default 5 ms): the
	// latency a lone record pays for batching.
	BatchTimeout time.Duration
	// NoCompression sends batches uncompressed (default: zstd, level 3).
	NoCompression bool
}

// Producer writes records, encoded by the caller, to one topic. Writes are asynchronous: each Send names a done
// callback that runs once the record is acknowledged by all in-sync replicas (acks=all), or with the error that
// made it fail. That callback is where a stage marks its input Delivery Done, so "committed" always means
// "durable downstream".
//
// Records are batched per partition (ProducerConfig.BatchTimeout, batches of up to Config.MaxMessageBytes) and
// compressed with zstd. The producer is not idempotent: a write retried after a lost acknowledgement may land
// twice, which every consumer tolerates (delivery is at-least-once; the sink writes an id once). Records are
// keyed by id and placed by the FNV-1a hash of the key (PartitionOf), so every version of one conversation
// lands on one partition.
//
// A record the broker refuses as too large (MESSAGE_TOO_LARGE: the topic's max.message.bytes is below
// Config.MaxMessageBytes) fails like one over the client-side limit: its error wraps ErrRecordTooLarge
// (see IsRecordTooLarge), names its size and, when the broker reports it, the topic's limit, and a later
// Send of the same record fails at once. The records of a batch the broker refused are first written
// again one at a time, so only a record refused on its own fails. MaxValueBytes says how large a value
// may be now, for a writer that shortens what it sends to fit (the dead letters of kafka/stream).
type Producer struct {
	cl       *Client
	cfg      Config
	name     string      // logical topic
	topic    string      // physical topic
	kc       *kgo.Client // batches and writes the records
	opts     []kgo.Opt   // kc's options, for solo
	maxBytes int64       // Config.MaxMessageBytes: the largest batch the producer sends
	met      *plumbing

	closing   chan struct{} // closed by Close: retries of SendRetrying waiting give up
	closeOnce sync.Once
	bg        background.Group // re-sends, retries of SendRetrying and their done callbacks; Close waits for them
	limit     atomic.Int64     // largest key+value+overhead a record may have: maxBytes, or the topic's limit once known

	lookup    sync.Mutex // guards looked and topicMax
	looked    bool
	topicMax  int // the topic's max.message.bytes (0: unknown)
	split     atomic.Bool
	refusedMu sync.Mutex
	refused   map[uint64]struct{} // fingerprints of records the broker refused on their own
	setupErr  error               // a Security setting that cannot be used: every Send fails with it

	soloOnce sync.Once
	solo     *kgo.Client // holds one record at a time: the records written on their own; made on first use
	soloErr  error

	authMu   sync.Mutex
	authCtx  context.Context // the records' context: cancelled, with the AuthError as its cause, once a broker refuses the credentials
	authFail context.CancelCauseFunc
	pinging  atomic.Bool // a Ping of OnBrokerConnect is running
}

// maxRefused bounds the fingerprints a Producer remembers.
const maxRefused = 4096

// NewProducer returns a Producer for the logical topic (namespaced by Config.Topic), with a client of its own
// connections. Close it before the Client.
func (cl *Client) NewProducer(topic string, pc ProducerConfig) *Producer {
	c := cl.cfg
	if pc.BatchTimeout <= 0 {
		pc.BatchTimeout = 5 * time.Millisecond
	}
	p := &Producer{cl: cl, cfg: c, name: topic, topic: c.Topic(topic), maxBytes: int64(c.maxMessageBytes()), met: cl.met,
		closing: make(chan struct{})}
	p.limit.Store(p.maxBytes)
	p.authCtx, p.authFail = context.WithCancelCause(context.Background())
	compression := kgo.ZstdCompression()
	if pc.NoCompression {
		compression = kgo.NoCompression()
	}
	opts, err := c.franzOpts()
	if err != nil {
		// A Security setting that cannot be used any more (a file gone since NewClient): every Send fails with it.
		p.setupErr = err
		return p
	}
	p.opts = slices.Clip(append(opts,
		kgo.WithLogger(franzLogger{c.logger().With("topic", p.topic)}),
		kgo.WithHooks(connectHook{p}),
		kgo.DefaultProduceTopic(p.topic),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(keyPartition)),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DisableIdempotentWrite(),
		kgo.ProducerBatchMaxBytes(int32(p.maxBytes)),
		kgo.ProducerBatchCompression(compression),
		// A record that fails this many attempts reaches its done callback; SendRetrying then retries it.
		kgo.RecordRetries(10),
	))
	if p.kc, err = kgo.NewClient(append(p.opts, kgo.ProducerLinger(pc.BatchTimeout))...); err != nil {
		p.setupErr = err
	}
	return p
}

// keyPartition is the partition of a record keyed key in a topic of n partitions: the FNV-1a hash of the key,
// as Sarama and kafka-go's Hash balancer place records (so a topic written by an older draftflow build keeps
// each conversation on its partition).
var keyPartition = kgo.SaramaCompatHasher(func(b []byte) uint32 {
	h := fnv.New32a()
	h.Write(b)
	return h.Sum32()
})

// Topic returns the physical topic this producer writes to.
func (p *Producer) Topic() string { return p.topic }

// SendRetrying writes value keyed by key as Send does and calls done once, never before SendRetrying returns:
// with nil once the broker acknowledged it; at once with the error when the record can never be written (it is
// over the message limit: IsRecordTooLarge); with ctx's error when ctx ends before a write succeeded. Any other
// failure is retried with exponential backoff (100 ms, growing to 10 s) for as long as ctx lasts and the
// producer is open: a failing broker holds the record back, never drops it. Close ends the retries (done gets an
// error saying the producer closed) and returns only after the done of every SendRetrying called before it has
// returned.
func (p *Producer) SendRetrying(ctx context.Context, key string, value []byte, done func(error)) {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(10*time.Second), backoff.WithMaxElapsedTime(0))
	var attempt func()
	failed := func(err error) {
		// done never runs from within SendRetrying (callers may hold a lock done takes): always on a goroutine
		// of the producer's, which Close waits for.
		switch {
		case IsRecordTooLarge(err), p.setupErr != nil:
			p.bg.Go(func() { done(err) })
			return
		}
		// Credentials the brokers refuse: retrying cannot help (explain tells them from a broker that is down).
		if err = p.cl.explain(ctx, err); IsAuthError(err) {
			p.bg.Go(func() { done(err) })
			return
		}
		if ctx.Err() != nil {
			p.bg.Go(func() { done(ctx.Err()) })
			return
		}
		wait := b.NextBackOff()
		p.cfg.logger().Warn("write failed; retrying", "topic", p.topic, "key", key, "err", err, "in", wait)
		p.bg.Go(func() {
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-t.C:
				attempt()
			case <-ctx.Done(): // a shutdown does not wait out the backoff
				done(ctx.Err())
			case <-p.closing:
				done(fmt.Errorf("kafka: producer of %s closed before %q was written: %w", p.topic, key, err))
			}
		})
	}
	attempt = func() {
		if err := p.Send(ctx, key, value, func(err error) {
			if err != nil {
				failed(err)
				return
			}
			done(nil)
		}); err != nil {
			failed(err)
		}
	}
	attempt()
}

// recordOverhead is what a record alone in a batch costs besides its key and value: the batch's header (65
// bytes) and the record's length fields, offsets, timestamp and attributes (at most 24), rounded up.
const recordOverhead = 128

func (p *Producer) tooLarge(key string, value []byte) bool {
	return int64(len(value)+len(key)+recordOverhead) > p.limit.Load()
}

// MaxValueBytes returns the largest value a record keyed key may have now: the message limit
// (Config.MaxMessageBytes, or the topic's max.message.bytes once the broker refused a record over it) less the
// key and the record's overhead.
func (p *Producer) MaxValueBytes(key string) int {
	return int(p.limit.Load()) - len(key) - recordOverhead
}

// ErrRecordTooLarge is wrapped by the error of a Send whose record exceeds the message limit
// (Config.MaxMessageBytes, or the topic's max.message.bytes once the broker refused a record over it), and by
// the done error of a record the broker refused as too large. It is permanent for that record: dead-letter it
// rather than retry. IsRecordTooLarge also recognizes the broker's own error for it.
var ErrRecordTooLarge = errors.New("record over the message size limit")

// IsRecordTooLarge reports whether err says a record is over a message size limit: ErrRecordTooLarge (the
// client-side check, or a broker refusal as a Producer reports it) or the broker's MESSAGE_TOO_LARGE
// (kerr.MessageTooLarge). Such a record fails every retry: dead-letter it.
func IsRecordTooLarge(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, ErrRecordTooLarge) || errors.Is(err, kerr.MessageTooLarge)
}

// Send writes value keyed by key. done, if not nil, runs exactly once: with nil after the broker acknowledged
// the record, or with the error. A record over the message limit (IsRecordTooLarge) fails at once: Send returns
// the error and done is not called.
func (p *Producer) Send(ctx context.Context, key string, value []byte, done func(error)) error {
	if p.setupErr != nil {
		return fmt.Errorf("kafka: write to %s: %w", p.topic, p.setupErr)
	}
	if p.tooLarge(key, value) {
		if limit := p.limit.Load(); limit < p.maxBytes {
			return fmt.Errorf("kafka: record %q is %d bytes, over the %d-byte max.message.bytes of %s (raise the topic's max.message.bytes): %w",
				key, len(value), limit, p.topic, ErrRecordTooLarge)
		}
		return fmt.Errorf("kafka: record %q is %d bytes, over the %d-byte limit of %s (raise --max-message-bytes): %w",
			key, len(value), p.maxBytes, p.topic, ErrRecordTooLarge)
	}
	if p.wasRefused([]byte(key), value) {
		return fmt.Errorf("kafka: record %q is %d bytes; the broker already refused it as over the message size limit of %s: %w",
			key, len(value), p.topic, ErrRecordTooLarge)
	}
	k := []byte(key)
	rctx := p.recordContext()
	p.kc.Produce(ctx, &kgo.Record{Key: k, Value: value, Context: rctx}, func(_ *kgo.Record, err error) {
		p.finish(k, value, done, refusal(rctx, err), false)
	})
	return nil
}

// finish settles one record the broker answered: it calls the record's done callback, unless the broker
// refused it as too large within a batch (not alone): it is then written again on its own.
func (p *Producer) finish(key, value []byte, done func(error), err error, alone bool) {
	if errors.Is(err, kerr.MessageTooLarge) {
		if !alone {
			if !p.split.Swap(true) {
				p.cfg.logger().Warn("the broker refused a batch as too large; writing its records one at a time",
					"topic", p.topic, "batch_bytes", p.maxBytes, "err", err)
			}
			p.bg.Go(func() { p.finish(key, value, done, p.writeAlone(key, value), true) })
			return
		}
		err = p.refusedAlone(key, value, err)
	}
	err = p.cfg.authError(err)
	if err == nil {
		p.met.producedRecords.WithLabelValues(p.topic).Inc()
		p.met.producedBytes.WithLabelValues(p.topic).Add(float64(len(value)))
	} else {
		p.met.produceErrors.WithLabelValues(p.topic).Inc()
	}
	if done != nil {
		done(err)
	}
}

// writeAlone writes one record in a batch of its own and returns the broker's answer.
func (p *Producer) writeAlone(key, value []byte) error {
	p.soloOnce.Do(func() {
		p.solo, p.soloErr = kgo.NewClient(append(p.opts, kgo.MaxBufferedRecords(1), kgo.ProducerLinger(0))...)
	})
	if p.soloErr != nil {
		return p.soloErr
	}
	rctx := p.recordContext()
	return refusal(rctx, p.solo.ProduceSync(context.Background(), &kgo.Record{Key: key, Value: value, Context: rctx}).FirstErr())
}

// connectHook is the Producer's kgo.HookBrokerConnect.
type connectHook struct{ p *Producer }

// OnBrokerConnect fails the records buffered and to come, through their context, when a broker refuses the
// client's credentials or certificate, which franz-go would retry until RecordRetries. A broker may refuse SASL
// credentials by closing the connection, which franz-go sees only as EOF: then a Ping, in the background,
// tells. A connection that authenticates lets records through again.
func (h connectHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	p := h.p
	switch {
	case err == nil:
		p.authMu.Lock()
		if p.authCtx.Err() != nil {
			p.authCtx, p.authFail = context.WithCancelCause(context.Background())
		}
		p.authMu.Unlock()
	case authCause(err) != "":
		p.refuse(p.cfg.authError(err))
	case p.cfg.Security.SASL.Mechanism != "" && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) &&
		!p.pinging.Swap(true):
		p.bg.Go(func() {
			defer p.pinging.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.cl.Ping(ctx); IsAuthError(err) {
				p.refuse(err)
			}
		})
	}
}

// refuse fails the records buffered and to come with err, an AuthError.
func (p *Producer) refuse(err error) {
	p.authMu.Lock()
	defer p.authMu.Unlock()
	p.authFail(err)
}

// recordContext returns the context of a record written now (see OnBrokerConnect).
func (p *Producer) recordContext() context.Context {
	p.authMu.Lock()
	defer p.authMu.Unlock()
	return p.authCtx
}

// refusal returns err, or, when err says a context ended and the record's context rctx was ended by refused
// credentials, that AuthError.
func refusal(rctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) && rctx.Err() != nil {
		if cause := context.Cause(rctx); IsAuthError(cause) {
			return cause
		}
	}
	return err
}

// refusedAlone records that the broker refused this record on its own and returns the error its done callback
// gets: it wraps ErrRecordTooLarge and err, and names the record's size and, when known, the topic's limit.
func (p *Producer) refusedAlone(key, value []byte, err error) error {
	p.remember(key, value)
	limit := ""
	if n := p.topicLimit(); n > 0 {
		limit = fmt.Sprintf(" %d-byte", n)
	}
	return fmt.Errorf("kafka: record %q is %d bytes; the broker refused it as over the%s max.message.bytes of %s: %w (%w)",
		key, len(value), limit, p.topic, ErrRecordTooLarge, err)
}

// topicLimit looks up the topic's max.message.bytes once, lowers the producer's limit to it, and returns it
// (0 when the broker did not say).
func (p *Producer) topicLimit() int {
	p.lookup.Lock()
	defer p.lookup.Unlock()
	if p.looked {
		return p.topicMax
	}
	p.looked = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	v, err := p.cl.Admin().TopicConfigValue(ctx, p.name, "max.message.bytes")
	cancel()
	n, cerr := strconv.Atoi(v)
	if err != nil || cerr != nil || n <= 0 {
		p.cfg.logger().Debug("max.message.bytes of the topic unknown", "topic", p.topic, "value", v, "err", err)
		return 0
	}
	p.topicMax = n
	if int64(n) < p.limit.Load() {
		p.limit.Store(int64(n))
		p.cfg.logger().Warn("topic accepts smaller records than this writer sends; larger records are dead-lettered",
			"topic", p.topic, "max_message_bytes", n, "writer_max_bytes", p.maxBytes)
	}
	return n
}

func fingerprint(key, value []byte) uint64 {
	h := fnv.New64a()
	h.Write(key)
	h.Write([]byte{0})
	h.Write(value)
	return h.Sum64()
}

func (p *Producer) remember(key, value []byte) {
	p.refusedMu.Lock()
	defer p.refusedMu.Unlock()
	if p.refused == nil || len(p.refused) >= maxRefused {
		p.refused = map[uint64]struct{}{}
	}
	p.refused[fingerprint(key, value)] = struct{}{}
}

func (p *Producer) wasRefused(key, value []byte) bool {
	p.refusedMu.Lock()
	defer p.refusedMu.Unlock()
	if len(p.refused) == 0 {
		return false
	}
	_, ok := p.refused[fingerprint(key, value)]
	return ok
}

// SendSync writes value keyed by key and waits for the broker's acknowledgement.
func (p *Producer) SendSync(ctx context.Context, key string, value []byte) error {
	errc := make(chan error, 1)
	if err := p.Send(ctx, key, value, func(err error) { errc <- err }); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes pending records, ends the retries of SendRetrying and closes the producer's clients and
// connections. It returns once every done callback of a record sent before it has run (re-sends of refused
// records and retries included): no callback runs after Close returns.
func (p *Producer) Close() error {
	p.closeOnce.Do(func() { close(p.closing) })
	if p.kc == nil { // made without a client: setupErr
		p.bg.Wait()
		return nil
	}
	err := p.kc.Flush(context.Background())
	p.bg.Wait()
	p.kc.Close()
	p.soloOnce.Do(func() {}) // no solo client is made from here on
	if p.solo != nil {
		p.solo.Close()
	}
	p.bg.Wait() // callbacks of records the close failed
	return err
}
