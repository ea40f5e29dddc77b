package admission

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/stages/generate/internal/fakesglang"
)

// clockAt returns a clock the test moves, starting at the Unix epoch.
func clockAt() (func() time.Time, *time.Time) {
	now := time.Unix(0, 0)
	return func() time.Time { return now }, &now
}

// TestUnreachableEndpointGivesUp: an endpoint where nothing listens is down in the metrics (and so in
// status) from the start; probes fail and are tried again until UnreachableTimeout has passed on the
// Controller's clock, then the Controller fails with an error naming the endpoint and the flag.
func TestUnreachableEndpointGivesUp(t *testing.T) {
	const url = "http://nothing-listens.invalid:30000"
	clock, now := clockAt()
	reg := prometheus.NewRegistry()
	c, err := NewController(Config{Endpoints: []string{url}, Policy: PolicyFixed, HTTPClient: fakesglang.NewNet().Client(),
		Registerer: reg, Logger: testLogger(t), Clock: clock, UnreachableTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		if f.GetName() == "draftflow_generate_endpoint_up" {
			for _, m := range f.GetMetric() {
				found = m.GetGauge().GetValue() == 0 && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == url
			}
		}
	}
	if !found {
		t.Errorf("no endpoint_up 0 series for %s before any probe: status would not show it", url)
	}
	if got := c.Stalled(); got != "" {
		t.Errorf("Stalled before any probe: %q, want none (too soon to say)", got)
	}
	*now = now.Add(9 * time.Minute)
	if err := c.Probe(context.Background(), 0); err == nil || c.Err() != nil {
		t.Fatalf("probe 9 minutes in: %v, fatal %v; want a failure to try again", err, c.Err())
	} else if got, want := c.Stalled(), "no SGLang server answers ("+url+": "+err.Error()+")"; got != want {
		t.Errorf("Stalled after a refused probe: %q, want %q", got, want)
	}
	*now = now.Add(time.Minute)
	err = c.Probe(context.Background(), 0)
	for _, want := range []string{"no SGLang endpoint answered", url, "--unreachable-timeout", "--sglang"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
	if c.Err() != err {
		t.Fatalf("Err %v, want the probe's error", c.Err())
	}
}

// TestLoadingEndpointIsWaitedFor: a server that answers 503 (SGLang loading a large model) for longer than
// UnreachableTimeout is waited for, and admits once it answers 200.
func TestLoadingEndpointIsWaitedFor(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 10000)
	f.Healthy.Store(false)
	clock, now := clockAt()
	c, err := NewController(Config{Endpoints: []string{f.URL}, Policy: PolicyFixed, HTTPClient: fakes.Client(),
		Registerer: prometheus.NewRegistry(), Logger: testLogger(t), Clock: clock, UnreachableTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Probe(context.Background(), 0); err == nil {
		t.Fatal("probe of a loading server passed")
	} else if got := c.Stalled(); !strings.HasPrefix(got, "no SGLang server is ready ("+f.URL+": ") {
		t.Errorf("Stalled %q while the server loads, want it not ready (it answers)", got)
	}
	*now = now.Add(time.Hour)
	if err := c.Probe(context.Background(), 0); err == nil || c.Err() != nil {
		t.Fatalf("probe an hour into loading: %v, fatal %v; want a failure to try again", err, c.Err())
	}
	f.Healthy.Store(true)
	if err := c.Probe(context.Background(), 0); err != nil || !c.AnyReady() {
		t.Fatalf("probe once loaded: %v", err)
	}
}
