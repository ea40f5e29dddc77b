package livesglang

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/kafka/kafkatest"
)

// TestShutdownAbortsOnServer runs the stages as separate processes on an embedded broker and SIGTERMs the
// generate process while the live server runs its requests, with a short --shutdown-grace: the requests it
// abandons must be aborted on the server (its sglang:num_aborted_requests_total counts them, and it runs
// nothing for draftflow afterwards), and a new generate process finishes the dataset with every row once.
func TestShutdownAbortsOnServer(t *testing.T) {
	need(t)
	srv := mainServer(t)
	broker := kafkatest.Embedded(t)
	dir := t.TempDir()
	const n = 6
	var lines []any
	for i := range n {
		lines = append(lines, chat(fmt.Sprintf("term-%02d", i), fmt.Sprintf("Explain topic %d at length.", i)))
	}
	data := filepath.Join(dir, "term.jsonl")
	writeJSONL(t, data, lines)
	out := filepath.Join(dir, "out")
	kafkaArgs := []string{"--brokers", strings.Join(broker.Brokers(), ","), "--namespace", "live-term"}
	stage := func(name string, args ...string) *proc {
		return startDraftflow(t, "draftflow "+name, nil, append(append([]string{name}, kafkaArgs...), args...)...)
	}
	load := func() (running, waiting int) {
		var l struct {
			Loads []struct {
				Running int `json:"num_running_reqs"`
				Waiting int `json:"num_waiting_reqs"`
			} `json:"loads"`
		}
		getJSON(t, http.MethodGet, srv.url+"/v1/loads", nil, &l)
		for _, x := range l.Loads {
			running += x.Running
			waiting += x.Waiting
		}
		return running, waiting
	}
	aborted := func() float64 {
		fams, err := scrape(srv.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return sum(fams, "sglang:num_aborted_requests_total")
	}
	if r, w := load(); r+w != 0 {
		t.Fatalf("the server is busy before the test (%d running, %d waiting)", r, w)
	}

	stage("tokenize", "--model", modelDir)
	stage("sink", "--out", out, "--shard-rows", "4", "--shard-interval", "2s")
	gen := stage("generate", "--sglang", srv.url, "--shutdown-grace", "1s")
	ing := stage("ingest", "--input", data, "--max-new-tokens", "128", "--temperature", "0")
	if err := ing.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	testutil.WaitFor(t, 5*time.Minute, "requests running on the server", func() bool {
		r, _ := load()
		return r >= 3
	})
	before := aborted()
	r, w := load()
	_ = gen.cmd.Process.Signal(syscall.SIGTERM)
	if err := gen.wait(t, 2*time.Minute); err != nil {
		t.Logf("generate exited: %v", err)
	}
	t.Logf("generate SIGTERMed with %d requests running and %d waiting on the server", r, w)
	testutil.WaitFor(t, time.Minute, "the server to drop draftflow's requests", func() bool {
		r, w := load()
		return r+w == 0
	})
	if d := aborted() - before; d < 1 {
		t.Errorf("sglang:num_aborted_requests_total rose by %v: the abandoned requests were not aborted on the server", d)
	} else {
		t.Logf("the server counted %v aborted requests", d)
	}
	// A new generate process finishes what the first one abandoned.
	stage("generate", "--sglang", srv.url)
	testutil.WaitFor(t, 10*time.Minute, "every conversation in the shards", func() bool {
		return countRows(out) >= n
	})
	rows := readRows(t, out)
	if len(rows) != n {
		t.Errorf("%d conversations in the shards, want %d", len(rows), n)
	}
}
