package kafkatest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/kafka"
)

// Brokers returns the bootstrap list of t's cluster: DRAFTFLOW_TEST_BROKERS's when it is set, else that of an
// embedded broker started for t and closed when the test ends.
func Brokers(t testing.TB) []string {
	t.Helper()
	if s := os.Getenv("DRAFTFLOW_TEST_BROKERS"); s != "" {
		return strings.Split(s, ",")
	}
	return Embedded(t).Brokers()
}

// Namespace returns a topic namespace unique to this call of t, so tests sharing one real cluster never see
// each other's topics or groups.
func Namespace(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-", "#", "-").Replace(t.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	return fmt.Sprintf("t-%s-%06d", name, rand.IntN(1e6))
}

// Cluster returns kc pointed at t's cluster (Brokers) in a fresh Namespace; kc's own Brokers and Namespace are
// ignored. No topic is made: Config makes every pipeline topic, or the test makes those it needs under its own
// settings (partitions, retention, max.message.bytes).
func Cluster(t testing.TB, kc kafka.Config) kafka.Config {
	t.Helper()
	kc.Brokers = Brokers(t)
	kc.Namespace = Namespace(t)
	return kc
}
