package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/internal/progress"
	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/topics"
)

// TestRunSaysWhyItStalls: a run against a URL where nothing listens says so on its progress line, with the URL
// and the refusal, within seconds, and its generate stage's status records say the same.
func TestRunSaysWhyItStalls(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	in := filepath.Join(t.TempDir(), "one.jsonl")
	if err := os.WriteFile(in, []byte(`{"id":"a","messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"hi"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kc := kafkatest.Config(t, 1)
	rc := simRun(kc, t.TempDir(), in)
	rc.Generate.Endpoints = []string{url}
	var out testutil.Buffer
	rc.Progress = progress.NewConsole(&out)
	reg := prometheus.NewRegistry()
	rc.Gatherer, rc.StatusInterval = reg, 200*time.Millisecond
	rc.Generate.Registerer, rc.Tokenize.Registerer, rc.Sink.Registerer, rc.Ingest.Registerer = reg, reg, reg, reg
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := pipeline.Run(ctx, rc); done <- err }()
	want := "prompts 0/1 (0%)"
	reason := "no SGLang server answers (" + url + ": "
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), reason) {
		if time.Now().After(deadline) {
			t.Fatalf("no reason on the progress line in 30 s:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, reason) {
			line = l
		}
	}
	t.Logf("progress line: %s", line)
	if !strings.HasPrefix(line, want) || !strings.Contains(line, "connection refused") {
		t.Errorf("progress line %q, want %q, then the URL and the refusal", line, want)
	}
	var stalled string
	for deadline := time.Now().Add(30 * time.Second); stalled == "" && time.Now().Before(deadline); {
		for _, s := range kafkatest.Collect[topics.Status](t, kc, topics.TopicStatus, kafkatest.Size(t, kc, topics.TopicStatus), 10*time.Second) {
			if s.Stage == "generate" && strings.HasPrefix(s.Stalled, reason) {
				stalled = s.Stalled
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if stalled == "" {
		t.Error("no generate status record says why the run is stalled")
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("a cancelled run with nothing written passed")
	}
}

// TestRunSaysBrokerUnreachable: a run whose Kafka broker goes away says so on its progress line, with the broker's
// error, once no prompt has been accounted for in stallAfter (10 s) and the check (at most 10 s more) failed.
func TestRunSaysBrokerUnreachable(t *testing.T) {
	e := kafkatest.Embedded(t)
	kc := kafkatest.Config(t, 1)
	kc.Brokers = e.Brokers()
	in := filepath.Join(t.TempDir(), "one.jsonl")
	if err := os.WriteFile(in, []byte(`{"id":"a","messages":[{"role":"user","content":"hello"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rc := simRun(kc, t.TempDir(), in)
	rc.Sim.Instant, rc.Sim.TimeScale = false, 1 // a reply takes minutes: the run is still going when the broker goes
	var out testutil.Buffer
	rc.Progress = progress.NewConsole(&out)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := pipeline.Run(ctx, rc); done <- err }()
	testutil.WaitFor(t, 30*time.Second, "the prompt on the progress line", func() bool {
		return strings.Contains(out.String(), "prompts 0/1 (0%)")
	})
	e.Close()
	reason := "the Kafka broker does not answer: "
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), reason) {
		select {
		case err := <-done:
			t.Fatalf("the run ended (%v) before it said the broker does not answer:\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no broker reason on the progress line in 60 s:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, reason) {
			t.Logf("progress line: %s", l)
			if !strings.HasPrefix(l, "prompts 0/1 (0%)") {
				t.Errorf("progress line %q, want the count first", l)
			}
			break
		}
	}
	cancel()
	<-done
}
