package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Client is a connection to the cluster a Config names: it owns the connections of the admin requests (one pool,
// with every TLS handshake and SASL exchange paid once per broker), makes the Producers and Consumers
// of a process, and reads topics outside any group (Follow, ReadPartition). Its admin requests are
// on Admin. A process makes one Client per cluster, passes it down and Closes it when it is done; it is safe for
// concurrent use.
//
// Producers and Consumers made by a Client hold their own connections (a producer's writers, a consumer's
// franz-go group client) and close them in their own Close or Run; Close the Client after them.
type Client struct {
	cfg       Config
	transport *kafkago.Transport // the admin requests' connection pool
	admin     *kafkago.Client
	met       *plumbing

	mu     sync.Mutex
	closed bool
	franz  *kgo.Client // the admin requests kafka-go cannot send or decode; made on first use
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
	installZstd()
	t, err := cfg.newTransport()
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, transport: t, met: newPlumbing(cfg.Registerer),
		admin: &kafkago.Client{Addr: kafkago.TCP(cfg.Brokers...), Timeout: 30 * time.Second, Transport: t}}, nil
}

// Config returns the Config the client was made from.
func (c *Client) Config() Config { return c.cfg }

// Admin returns the client's admin requests: topics, groups, offsets, retention and topic ids. It shares the
// client's connections and needs no Close of its own.
func (c *Client) Admin() *Admin { return &Admin{cfg: c.cfg, cl: c} }

// Close closes the client's connections. Requests made after it fail. Close the Producers and
// Consumers made by the client first (a running Consumer commits through the client). Calling it again does
// nothing.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.transport.CloseIdleConnections()
		if c.franz != nil {
			c.franz.Close()
		}
	}
	return nil
}

// franzAdmin returns the client's franz-go client of the admin requests kafka-go cannot send or decode (topic
// ids, group descriptions), made on first use with the Config's TLS and SASL; Close closes it.
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

// adminClient returns the kafka-go client of the admin requests; its error says the Client is closed.
func (c *Client) adminClient() (*kafkago.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	return c.admin, nil
}

// dialer returns a kafka-go dialer carrying the client id, TLS and SASL (consumer groups and readers). The
// Security's files are read again each time, so a consumer group or reader built later uses a rotated password.
func (c *Client) dialer() (*kafkago.Dialer, error) {
	if err := c.open(); err != nil {
		return nil, err
	}
	r, mech, err := c.cfg.Security.kafkaGo()
	if err != nil {
		return nil, err
	}
	return &kafkago.Dialer{ClientID: c.cfg.clientID(), Timeout: 10 * time.Second, DualStack: true, TLS: r.tls, SASLMechanism: mech}, nil
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

// newTransport returns a kafka-go transport (writers, the admin client) with TLS and SASL, the Security's files
// read now.
func (c Config) newTransport() (*kafkago.Transport, error) {
	r, mech, err := c.Security.kafkaGo()
	if err != nil {
		return nil, err
	}
	return &kafkago.Transport{ClientID: c.clientID(), DialTimeout: 10 * time.Second, TLS: r.tls, SASL: mech,
		Dial: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}, nil
}

// newFranz returns a franz-go client of the cluster (its brokers, client id, TLS and SASL) with opts: the
// Consumer's group member and the admin client of franzAdmin. franz-go retries a connection the broker closed
// during authentication until ctx ends (it sees only EOF), so with Security set a kafka-go connection is made
// first, which makes refused credentials a prompt AuthError.
func (c *Client) newFranz(ctx context.Context, opts ...kgo.Opt) (*kgo.Client, error) {
	if err := c.open(); err != nil {
		return nil, err
	}
	sec, err := c.cfg.franzOpts()
	if err != nil {
		return nil, err
	}
	if c.cfg.Security != (Security{}) {
		if err := c.Ping(ctx); IsAuthError(err) {
			return nil, err
		}
	}
	return kgo.NewClient(append(append(sec, kgo.SeedBrokers(c.cfg.Brokers...), kgo.ClientID(c.cfg.clientID())), opts...)...)
}

// franzOpts returns the franz-go client options of TLS and SASL.
func (c Config) franzOpts() ([]kgo.Opt, error) {
	r, err := c.Security.resolve()
	if err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if r.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(r.tls.Clone()))
	}
	if m := r.franzSASL(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// Ping opens one connection to a bootstrap broker with the TLS and SASL of Security, authenticates and closes
// it. It returns nil once one broker accepted the client, an AuthError when a broker refused its credentials or
// certificate, and otherwise the last connection error. kafka-go's pooled clients hide why a connection
// failed (a request then fails with "Broker Not Available" or EOF); Ping tells an authentication failure apart.
func (c *Client) Ping(ctx context.Context) error {
	d, err := c.dialer()
	if err != nil {
		return err
	}
	var last error
	for _, b := range c.cfg.Brokers {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err := d.DialContext(pctx, "tcp", b)
		cancel()
		if err == nil {
			_ = conn.Close()
			return nil
		}
		if last = c.cfg.authError(err); IsAuthError(last) {
			return last
		}
	}
	return fmt.Errorf("kafka: connect to %v: %w", c.cfg.Brokers, last)
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
