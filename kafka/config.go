package kafka

import (
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	kafkago "github.com/segmentio/kafka-go"
)

// Config says how to reach Kafka and how topics are laid out. The zero value of every field but Brokers is a
// documented default.
type Config struct {
	// Brokers is the bootstrap list, host:port each.
	Brokers []string
	// Partitions is the partition count of topics this process creates (default 8). Existing topics keep theirs.
	Partitions int
	// ReplicationFactor of created topics (default 1).
	ReplicationFactor int
	// MaxMessageBytes is the largest record batch a topic accepts and a writer sends (default 8 MiB). Topics are
	// created with max.message.bytes set to it, and writers use it as BatchBytes, so a single record of tens of
	// thousands of tokens always fits.
	MaxMessageBytes int
	// ClientID identifies this process to the brokers (default "draftflow").
	ClientID string
	// Namespace, when set, prefixes every topic name ("<namespace>.prompts"), so several pipelines (or test
	// runs) can share one cluster. Stages always use the logical names; Producer, Consumer and EnsureTopics
	// apply the prefix.
	Namespace string
	// Logger receives plumbing logs (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives the plumbing metrics of this Config's producers and consumers (default
	// prometheus.DefaultRegisterer; a process serving one registry passes it here and to every stage).
	Registerer prometheus.Registerer
}

// Topic returns the physical topic name of a logical one (see Namespace).
func (c Config) Topic(name string) string {
	if c.Namespace == "" {
		return name
	}
	return c.Namespace + "." + name
}

// Default values of Config.
const (
	DefaultPartitions      = 8
	DefaultMaxMessageBytes = 8 << 20
)

func (c Config) partitions() int {
	if c.Partitions > 0 {
		return c.Partitions
	}
	return DefaultPartitions
}

func (c Config) replication() int {
	if c.ReplicationFactor > 0 {
		return c.ReplicationFactor
	}
	return 1
}

func (c Config) maxMessageBytes() int {
	if c.MaxMessageBytes > 0 {
		return c.MaxMessageBytes
	}
	return DefaultMaxMessageBytes
}

func (c Config) clientID() string {
	if c.ClientID != "" {
		return c.ClientID
	}
	return "draftflow"
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// ParseBrokers splits a comma-separated broker list, falling back to the DRAFTFLOW_BROKERS environment
// variable when s is empty. It returns nil when neither is set.
func ParseBrokers(s string) []string {
	if s == "" {
		s = os.Getenv("DRAFTFLOW_BROKERS")
	}
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// dialer returns a kafka-go dialer carrying the client id.
func (c Config) dialer() *kafkago.Dialer {
	return &kafkago.Dialer{ClientID: c.clientID(), Timeout: 10 * time.Second, DualStack: true}
}
