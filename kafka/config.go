package kafka

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config says how to reach Kafka and how topics are laid out: plain data, read by NewClient (which makes the
// connections) and by the Client's Producers, Consumers and Admin. The zero value of every field but Brokers is
// a documented default.
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
	// Security configures TLS and SASL for every connection (zero: plaintext, unauthenticated).
	Security Security
	// Retention is how long topics this process creates keep their records (retention.ms): 0 or negative keeps
	// them forever (retention.ms=-1), the default, so a replay can always start from the beginning.
	// retention.bytes is always -1 (no size limit). Existing topics keep theirs.
	Retention time.Duration
	// Logger receives plumbing logs (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives the plumbing metrics of the Client's producers and consumers (default
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

// ParseBrokers splits a comma-separated broker list ("host:port,host:port"), dropping blanks. It returns nil
// for an empty list.
func ParseBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// retentionMs is the retention.ms of created topics: -1 (forever) unless Retention is positive.
func (c Config) retentionMs() int64 {
	if c.Retention <= 0 {
		return -1
	}
	return max(c.Retention.Milliseconds(), 1)
}

func (c Config) retentionText() string {
	if c.Retention <= 0 {
		return "forever"
	}
	return c.Retention.String()
}

// ParseRetention parses a --retention value: "forever", "-1" or "" (keep records forever, returned as 0), a Go
// duration ("72h", "90m") or a number of days ("7d").
func ParseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "forever", "-1", "infinite", "none":
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("retention %q: want a positive number of days (7d), a duration (72h) or forever", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("retention %q: want a positive duration (72h), a number of days (7d) or forever", s)
	}
	return d, nil
}
