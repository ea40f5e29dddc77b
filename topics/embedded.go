package topics

import (
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded is an in-process Kafka-protocol broker (franz-go's kfake): the default when no brokers are given,
// and the broker of the unit tests. It keeps everything in memory and speaks the real wire protocol, so the
// stages use exactly the code they use against Apache Kafka.
type Embedded struct {
	c *kfake.Cluster
}

// EmbeddedConfig tunes the embedded broker; zero values are documented defaults.
type EmbeddedConfig struct {
	// Port to listen on at 127.0.0.1 (default: a free port).
	Port int
	// MaxMessageBytes is the broker's message.max.bytes (default DefaultMaxMessageBytes).
	MaxMessageBytes int
	// MinSessionTimeout lets tests use short group session timeouts (default 1 s).
	MinSessionTimeout time.Duration
}

// StartEmbedded starts an embedded broker.
func StartEmbedded(ec EmbeddedConfig) (*Embedded, error) {
	if ec.MaxMessageBytes <= 0 {
		ec.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if ec.MinSessionTimeout <= 0 {
		ec.MinSessionTimeout = time.Second
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(ec.MinSessionTimeout),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(ec.MaxMessageBytes)}),
	}
	if ec.Port > 0 {
		opts = append(opts, kfake.Ports(ec.Port))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("topics: start embedded broker: %w", err)
	}
	return &Embedded{c: c}, nil
}

// Brokers returns the bootstrap addresses of the embedded broker.
func (e *Embedded) Brokers() []string { return e.c.ListenAddrs() }

// Cluster returns the kfake cluster behind the broker, for tests that inject faults with its Control
// functions (a refused commit, a produce request held back).
func (e *Embedded) Cluster() *kfake.Cluster { return e.c }

// Close stops the broker; everything it held is gone.
func (e *Embedded) Close() { e.c.Close() }
