package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka/kafkatest"
)

// A stage process serves one HTTP endpoint: /metrics over its own registry (its stage's series and the Kafka
// plumbing's), /healthz, and /readyz, which turns ready once its consumer owns partitions.
func TestStageServesMetricsAndReadiness(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	served := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runSinkCommand(ctx, []string{"--brokers", strings.Join(kc.Brokers, ","), "--namespace", kc.Namespace,
			"--out", t.TempDir(), "--metrics-addr", "127.0.0.1:0", "--log-level", "warn"}, func(addr string) { served <- addr })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sink: %v", err)
		}
	}()
	var addr string
	select {
	case addr = <-served:
	case err := <-done:
		done <- err
		t.Fatalf("sink ended before serving: %v", err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := get("/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never ready: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	code, body := get("/metrics")
	for _, want := range []string{"draftflow_sink_buffered_rows", "draftflow_assigned_partitions", "go_goroutines"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("/metrics (%d) lacks %s", code, want)
		}
	}
}

// A stage process answers /readyz with 503 from the first request on: the stages it runs are expected before its
// server starts, not once each stage gets round to adding its check (CI once read a sink's /readyz as 200 before
// the sink had registered anything).
func TestSetupExpectsStagesBeforeServing(t *testing.T) {
	fs := newFlagSet("sink")
	var c common
	c.register(fs, "")
	if err := fs.Parse([]string{"--log-level", "warn"}); err != nil {
		t.Fatal(err)
	}
	p, err := c.setup(context.Background(), "sink")
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if err := p.ready.Check(); err == nil || !strings.Contains(err.Error(), "sink: starting") {
		t.Fatalf("ready before the sink added its check: %v", err)
	}
	p.ready.Add("sink", func() error { return nil })
	if err := p.ready.Check(); err != nil {
		t.Fatal(err)
	}
}
