// Package embedded runs an in-process Kafka-protocol broker (franz-go's kfake): the broker of a
// single-process `draftflow run` when no brokers are given, of `draftflow bench pipeline`, and of the unit
// tests (through kafkatest). It keeps everything in memory and speaks the real wire protocol, so the stages
// run exactly the code they run against Apache Kafka. Stages never import it.
package embedded

import (
	"crypto/tls"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/draftflow/draftflow/kafka"
)

// Broker is a running embedded broker.
type Broker struct {
	c *kfake.Cluster
}

// Config tunes the embedded broker; zero values are documented defaults.
type Config struct {
	// Port to listen on at 127.0.0.1 (default: a free port).
	Port int
	// MaxMessageBytes is the broker's message.max.bytes (default kafka.DefaultMaxMessageBytes).
	MaxMessageBytes int
	// MinSessionTimeout lets tests use short group session timeouts (default 1 s).
	MinSessionTimeout time.Duration
	// TLS, when set, makes the broker accept TLS connections only (tests of kafka.Security).
	TLS *tls.Config
	// Users, when set, turns on SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with these users.
	Users []User
}

// User is a SASL user of the embedded broker.
type User struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string
	// Name and Password are the credentials.
	Name, Password string
}

// Start starts an embedded broker.
func Start(ec Config) (*Broker, error) {
	if ec.MaxMessageBytes <= 0 {
		ec.MaxMessageBytes = kafka.DefaultMaxMessageBytes
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
	if ec.TLS != nil {
		opts = append(opts, kfake.TLS(ec.TLS))
	}
	if len(ec.Users) > 0 {
		opts = append(opts, kfake.EnableSASL())
		for _, u := range ec.Users {
			opts = append(opts, kfake.Superuser(u.Mechanism, u.Name, u.Password))
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("embedded: start broker: %w", err)
	}
	return &Broker{c: c}, nil
}

// Brokers returns the bootstrap addresses of the embedded broker.
func (e *Broker) Brokers() []string { return e.c.ListenAddrs() }

// Cluster returns the kfake cluster behind the broker, for tests that inject faults with its Control
// functions (a refused commit, a produce request held back); kafkatest wraps the common ones.
func (e *Broker) Cluster() *kfake.Cluster { return e.c }

// Close stops the broker; everything it held is gone.
func (e *Broker) Close() { e.c.Close() }
