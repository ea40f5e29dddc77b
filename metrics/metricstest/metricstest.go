// Package metricstest reads metrics back in tests: what a registry holds, by name and labels.
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Counter returns the sum of the counter series of g named name whose labels include every pair of labels (0
// when there is none); a Gather error fails the test.
func Counter(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}
