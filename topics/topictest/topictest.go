// Package topictest gives tests a Kafka cluster: the one named by DRAFTFLOW_TEST_BROKERS (a real Apache Kafka,
// as `make test-integration` starts), or else an embedded broker private to the test. Each call returns a
// Config with a fresh Namespace, so tests sharing one real cluster never see each other's topics or groups.
package topictest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/topics"
)

// Real reports whether tests run against an external cluster (DRAFTFLOW_TEST_BROKERS is set).
func Real() bool { return os.Getenv("DRAFTFLOW_TEST_BROKERS") != "" }

// Config returns a topics.Config for t with a unique Namespace and the given partition count, and creates every
// pipeline topic in it. The embedded broker, if one is started, is closed when the test ends.
func Config(t testing.TB, partitions int) topics.Config {
	t.Helper()
	var brokers []string
	if s := os.Getenv("DRAFTFLOW_TEST_BROKERS"); s != "" {
		brokers = strings.Split(s, ",")
	} else {
		e, err := topics.StartEmbedded(topics.EmbeddedConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		brokers = e.Brokers()
	}
	name := strings.NewReplacer("/", "-", " ", "-", "#", "-").Replace(t.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	cfg := topics.Config{
		Brokers:    brokers,
		Partitions: partitions,
		Namespace:  fmt.Sprintf("t-%s-%06d", name, rand.IntN(1e6)),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cfg.EnsureTopics(ctx, topics.All...); err != nil {
		t.Fatal(err)
	}
	return cfg
}
