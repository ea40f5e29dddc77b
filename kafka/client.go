package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// Client is a connection to the cluster a Config names: it owns the client of the admin requests (its
// connections, with every TLS handshake and SASL exchange paid once per broker), makes the Producers and
// Consumers of a process, and reads topics outside any group (Follow, ReadPartition). Its admin requests are on
// Admin. A process makes one Client per cluster, passes it down and Closes it when it is done; it is safe for
// concurrent use.
//
// Producers and Consumers made by a Client hold their own connections (a producer's client, a consumer's group
// member) and close them in their own Close or Run; Close the Client after them.
type Client struct {
	cfg Config
	met *plumbing

	mu     sync.Mutex
	closed bool
	franz  *kgo.Client // the admin requests; made on first use
}

// errClosed is returned by the requests of a closed Client.
var errClosed = errors.New("kafka: client closed")

// NewClient returns a Client of the cluster cfg names. It reads the files cfg.Security names (CA, client
// certificate and key, password) and fails, naming the setting, when they cannot be used; it opens no connection
// yet (Ping does).
func NewClient(cfg Config) (*Client, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers configured")
	}
	if _, err := cfg.Security.resolve(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, met: newPlumbing(cfg.Registerer)}, nil
}

// Config returns the Config the client was made from.
func (c *Client) Config() Config { return c.cfg }

// Admin returns the client's admin requests: topics, groups, offsets, retention and topic ids. It shares the
// client's connections and needs no Close of its own.
func (c *Client) Admin() *Admin { return &Admin{cfg: c.cfg, cl: c} }

// Close closes the client's connections. Requests made after it fail. Close the Producers and Consumers made by
// the client first (a running Consumer commits through the client). Calling it again does nothing.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		if c.franz != nil {
			c.franz.Close()
		}
	}
	return nil
}

// franzAdmin returns the franz-go client of the admin requests, made on first use with the Config's TLS and
// SASL; Close closes it.
func (c *Client) franzAdmin(ctx context.Context) (*kgo.Client, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClosed
	}
	if cl := c.franz; cl != nil {
		c.mu.Unlock()
		return cl, nil
	}
	c.mu.Unlock()
	cl, err := c.newFranz(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		cl.Close()
		return nil, errClosed
	case c.franz != nil: // another request made one meanwhile
		cl.Close()
	default:
		c.franz = cl
	}
	return c.franz, nil
}

// open returns errClosed once the client is closed.
func (c *Client) open() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	return nil
}

// franzOpts returns the options every franz-go client of the cluster starts from: its brokers, the client id, TLS
// and SASL (the Security's files read now), and the logger.
func (c Config) franzOpts() ([]kgo.Opt, error) {
	r, err := c.Security.resolve()
	if err != nil {
		return nil, err
	}
	return append(r.franzOpts(nil), kgo.SeedBrokers(c.Brokers...), kgo.ClientID(c.clientID()),
		kgo.WithLogger(franzLogger{c.logger()})), nil
}

// newFranz returns a franz-go client of the cluster with opts added: the admin client, a Consumer's group member,
// the readers of Follow and ReadPartition. franz-go retries a connection the broker closed during authentication
// until ctx ends (it sees only EOF), so with Security set the client is made after a Ping, which makes refused
// credentials a prompt AuthError.
func (c *Client) newFranz(ctx context.Context, opts ...kgo.Opt) (*kgo.Client, error) {
	if err := c.open(); err != nil {
		return nil, err
	}
	base, err := c.cfg.franzOpts()
	if err != nil {
		return nil, err
	}
	if c.cfg.Security != (Security{}) {
		if err := c.Ping(ctx); IsAuthError(err) {
			return nil, err
		}
	}
	return kgo.NewClient(append(base, opts...)...)
}

// Ping connects to the bootstrap brokers one after another with the TLS and SASL of Security, authenticates and
// asks for the cluster's brokers. It returns nil once one broker answered, an AuthError when a broker refused the
// client's credentials or certificate, and otherwise the last connection error. A broker may refuse credentials
// by closing the connection during the SASL exchange (the embedded broker does), which the client library sees
// only as EOF: Ping tells that apart as a refusal.
func (c *Client) Ping(ctx context.Context) error {
	if err := c.open(); err != nil {
		return err
	}
	r, err := c.cfg.Security.resolve()
	if err != nil {
		return err
	}
	var last error
	for _, b := range c.cfg.Brokers {
		if last = c.pingBroker(ctx, b, r); last == nil {
			return nil
		}
		if last = c.cfg.authError(last); IsAuthError(last) {
			return last
		}
	}
	return fmt.Errorf("kafka: connect to %v: %w", c.cfg.Brokers, last)
}

// pingBroker connects to one broker, authenticates and sends it a Metadata request.
func (c *Client) pingBroker(ctx context.Context, broker string, r resolved) error {
	var watch *exchangeWatch
	opts := append(r.franzOpts(func(m sasl.Mechanism) sasl.Mechanism {
		watch = &exchangeWatch{Mechanism: m}
		return watch
	}), kgo.SeedBrokers(broker), kgo.ClientID(c.cfg.clientID()), kgo.DialTimeout(10*time.Second),
		kgo.WithLogger(franzLogger{c.cfg.logger()}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = cl.Ping(pctx)
	if err != nil && watch != nil && watch.open.Load() > 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		err = fmt.Errorf("%w: the broker closed the connection during the SASL exchange", errSASLRefused)
	}
	return err
}

// exchangeWatch is a SASL mechanism that counts its exchanges started and not completed.
type exchangeWatch struct {
	sasl.Mechanism
	open atomic.Int32
}

func (w *exchangeWatch) Authenticate(ctx context.Context, host string) (sasl.Session, []byte, error) {
	s, first, err := w.Mechanism.Authenticate(ctx, host)
	if err != nil {
		return nil, nil, err
	}
	w.open.Add(1)
	return &watchedSession{Session: s, w: w}, first, nil
}

type watchedSession struct {
	sasl.Session
	w    *exchangeWatch
	done bool
}

func (s *watchedSession) Challenge(challenge []byte) (bool, []byte, error) {
	done, resp, err := s.Session.Challenge(challenge)
	if done && err == nil && !s.done {
		s.done = true
		s.w.open.Add(-1)
	}
	return done, resp, err
}

// explain returns err as an AuthError when it is one, or when, on a cluster with Security set, a Ping shows the
// brokers refuse this client's credentials (the library's error then hides it); otherwise err unchanged.
func (c *Client) explain(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if aerr := c.cfg.authError(err); IsAuthError(aerr) {
		return aerr
	}
	if c.cfg.Security == (Security{}) || errors.Is(err, context.Canceled) {
		return err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if perr := c.Ping(pctx); IsAuthError(perr) {
		return perr
	}
	return err
}
