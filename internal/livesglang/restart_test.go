package livesglang

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testutil"
)

// TestAPIKeyAndRestart uses one server started with --api-key. Without the key draftflow stops at once with
// the message that says how to give one; with it (DRAFTFLOW_SGLANG_API_KEY) a run goes through while the
// server is SIGKILLed mid-run and started again on the same port: the stage sees the server go and come
// back (with a new startup_time), retries the requests it lost, and every row lands exactly once.
func TestAPIKeyAndRestart(t *testing.T) {
	need(t)
	const key = "live-tier-key-3f9c"
	srv := startServer(t, "keyed", 4096, "--api-key", key)
	dir := t.TempDir()
	auth := []string{"Authorization", "Bearer " + key}

	t.Run("api-key", func(t *testing.T) {
		if code := getJSON(t, http.MethodGet, srv.url+"/server_info", nil, nil); code != http.StatusUnauthorized {
			t.Fatalf("/server_info without the key: HTTP %d, want 401", code)
		}
		data := filepath.Join(dir, "few.jsonl")
		writeJSONL(t, data, []any{chat("key-0", "Hello there."), chat("key-1", "Hello again.")})
		p := startDraftflow(t, "draftflow run without key", []string{"DRAFTFLOW_SGLANG_API_KEY="}, "run", "--input", data,
			"--model", modelDir, "--sglang", srv.url, "--out", filepath.Join(dir, "nokey"), "--max-new-tokens", "8")
		err := p.wait(t, 3*time.Minute)
		if err == nil {
			t.Fatal("draftflow run without the API key exited 0")
		}
		out := p.output()
		if !strings.Contains(out, "set --sglang-api-key-file or DRAFTFLOW_SGLANG_API_KEY") || !strings.Contains(out, "401") {
			t.Errorf("draftflow run without the key failed (%v) without saying how to set one:\n%s", err, tail(out, 15))
		}
		if strings.Contains(out, key) {
			t.Error("the key appears in draftflow's output")
		}
	})

	t.Run("restart", func(t *testing.T) {
		var before struct {
			Startup any `json:"startup_time"`
		}
		getJSON(t, http.MethodGet, srv.url+"/server_info", nil, &before, auth...)
		var lines []any
		const n = 12
		for i := range n {
			lines = append(lines, chat(fmt.Sprintf("restart-%02d", i), fmt.Sprintf("Describe the city number %d in detail.", i)))
		}
		data := filepath.Join(dir, "restart.jsonl")
		writeJSONL(t, data, lines)
		out := filepath.Join(dir, "restart")
		p := startDraftflow(t, "draftflow run with key", []string{"DRAFTFLOW_SGLANG_API_KEY=" + key}, "run", "--input", data,
			"--model", modelDir, "--sglang", srv.url, "--out", out, "--max-new-tokens", "48", "--temperature", "0")
		// Kill the server while it runs draftflow's requests.
		var load struct {
			Loads []struct {
				Running int `json:"num_running_reqs"`
				Waiting int `json:"num_waiting_reqs"`
			} `json:"loads"`
		}
		testutil.WaitFor(t, 5*time.Minute, "requests running on the server", func() bool {
			getJSON(t, http.MethodGet, srv.url+"/v1/loads", nil, &load, auth...)
			return len(load.Loads) > 0 && load.Loads[0].Running >= 3
		})
		srv.kill(t)
		t.Logf("server SIGKILLed with %d requests running and %d waiting", load.Loads[0].Running, load.Loads[0].Waiting)
		srv.restart(t)
		var after struct {
			Startup any `json:"startup_time"`
		}
		getJSON(t, http.MethodGet, srv.url+"/server_info", nil, &after, auth...)
		if fmt.Sprint(before.Startup) == fmt.Sprint(after.Startup) {
			t.Errorf("startup_time unchanged by the restart: %v", after.Startup)
		}
		if err := p.wait(t, 10*time.Minute); err != nil {
			t.Fatalf("draftflow run: %v", err)
		}
		rows := readRows(t, out)
		if len(rows) != n {
			t.Errorf("%d conversations in the shards, want %d", len(rows), n)
		}
		log := p.output()
		if strings.Count(log, `msg="endpoint ready"`) < 2 {
			t.Errorf("the stage did not bring the restarted server up again (endpoint ready %d times)", strings.Count(log, `msg="endpoint ready"`))
		}
		if !strings.Contains(log, `msg="endpoint drained"`) && !strings.Contains(log, `msg="endpoint restarted`) {
			t.Error("the stage never noticed the server going away")
		}
		m := p.lastMetrics()
		lost := 0.0
		for _, o := range []string{"connection_error", "drained", "server_error"} {
			v, _ := sample(m, "draftflow_generate_requests_total", "endpoint", srv.url, "outcome", o)
			lost += v
		}
		if lost == 0 {
			t.Error("requests were in flight at the kill, but no attempt ended lost (connection_error, drained, server_error)")
		}
		t.Logf("%v request attempts lost with the server and retried; %d rows, each once", lost, len(rows))
	})
}
