package livesglang

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/sglang/sim"
)

// liveOnlyFile lists, per request, the fields the live server answers that the simulator leaves out
// (server arguments it does not model, timing fields, sections the stage never reads). Fields the simulator
// sends are compared with the live server's directly; this file is what keeps drift on the live side from
// passing: a field the live server adds, drops, or answers as another type fails the test until the file
// says so. DRAFTFLOW_LIVE_UPDATE=1 rewrites it from the live server's answers.
const liveOnlyFile = "testdata/live_only.json"

// shape flattens a JSON value into paths and kinds: "meta_info.finish_reason.type" -> "string". Arrays of
// objects contribute their elements' fields under "name[]"; an array of scalars is "array". A null is kind
// "null", so a field null on one side and set on the other differs.
func shape(v any, path string, out map[string]string) {
	switch x := v.(type) {
	case nil:
		out[path] = "null"
	case bool:
		out[path] = "bool"
	case float64, json.Number:
		out[path] = "number"
	case string:
		out[path] = "string"
	case map[string]any:
		out[path] = "object"
		for k, e := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			shape(e, p, out)
		}
	case []any:
		out[path] = "array"
		for _, e := range x {
			if _, ok := e.(map[string]any); ok {
				shape(e, path+"[]", out)
			}
		}
	}
}

// simOnly are the known differences of the simulator's answers from the live server's: the simulator's own
// section, and what a CPU server answers otherwise than the GPU server the simulator models. Keys are
// "request path" (paths under a listed one included).
var simOnly = map[string]string{}

func init() {
	for _, p := range []string{"simulator", "simulator.instant", "simulator.manual", "simulator.release", "simulator.restarts",
		"simulator.time_scale", "simulator.vocab_size", "simulator.eos_ids", "simulator.ranks", "simulator.ranks[]",
		"simulator.ranks[].cached_tokens", "simulator.ranks[].sim_time", "simulator.ranks[].new_token_ratio",
		"simulator.ranks[].dp_rank", "simulator.ranks[].used_tokens"} {
		simOnly["server_info "+p] = "the simulator's own state, which no client reads"
	}
	for _, r := range []string{"loads", "loads_core_memory"} {
		simOnly[r+" accelerator"] = "the device name on a GPU (which the simulator models), null on the CPU"
	}
}

// exchange is one request sent to both servers, and their answers.
type exchange struct {
	name   string // the key in liveOnlyFile
	status [2]int
	body   [2][]byte
}

// send sends one request to url and returns the status and body.
func send(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	code, data, err := trySend(method, url, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return code, data
}

// trySend is send returning its error (for goroutines, which must not end the test).
func trySend(method, url string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// newSim serves a simulator of cfg (logs discarded) for t.
func newSim(t *testing.T, cfg sim.Config) string {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		ts.Close()
	})
	return ts.URL
}

// TestSimulatorMatchesLive sends the requests the generate stage makes, and the errors it must understand, to
// the simulator and to the live server, and compares the answers' shapes (fields, types, nulls): /server_info,
// /v1/loads (as the stage polls it and plain), /generate finished by length, by a stop token and by an
// abort, /abort_request, a prompt over the context (400), a full queue (503, --max-queued-requests), and the
// /metrics families the stage reads. Every field the simulator sends must be in the live answer with the same
// kind; the live server's other fields must be exactly those testdata/live_only.json lists.
func TestSimulatorMatchesLive(t *testing.T) {
	need(t)
	live := mainServer(t)
	var info map[string]any
	getJSON(t, http.MethodGet, live.url+"/server_info", nil, &info)
	ctxLen := 2048 // config.json max_position_embeddings
	base := sim.Config{MaxTotalTokens: live.pool, ContextLength: ctxLen, ModelPath: modelDir, MaxQueuedRequests: 24}
	simURL := newSim(t, base)
	urls := [2]string{simURL, live.url}

	var exs []*exchange
	both := func(name, method, path string, body any) *exchange {
		ex := &exchange{name: name}
		for i, u := range urls {
			ex.status[i], ex.body[i] = send(t, method, u+path, body)
		}
		exs = append(exs, ex)
		return ex
	}
	prompt := []int{151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198}
	// A first request on each, so the measured ones find their prompt in the radix cache whatever ran before
	// (meta_info.cached_tokens_details is null without a cache hit).
	for _, u := range urls {
		send(t, http.MethodPost, u+"/generate", map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 1}})
	}
	lengthEx := both("generate_length", http.MethodPost, "/generate", map[string]any{"input_ids": prompt, "rid": "contract-gen",
		"sampling_params": map[string]any{"max_new_tokens": 4, "temperature": 0, "skip_special_tokens": false}})

	// Stop: on the live server, stop_token_ids holding the token greedy decoding produces second, so the request
	// ends there; the simulator never ends a request on a stop_token_ids entry (its random outputs avoid them),
	// so its side is a simulator whose outputs end with EOS after two tokens. Both answer finish_reason
	// {"type": "stop", "matched": <id>} with the matched id the last of output_ids.
	var g struct {
		OutputIDs []int `json:"output_ids"`
	}
	if err := json.Unmarshal(lengthEx.body[1], &g); err != nil || len(g.OutputIDs) < 2 {
		t.Fatalf("live /generate answered %d %.300s", lengthEx.status[1], lengthEx.body[1])
	}
	stopID := g.OutputIDs[1]
	eosSim := newSim(t, sim.Config{MaxTotalTokens: live.pool, ContextLength: ctxLen, ModelPath: modelDir, MaxQueuedRequests: 24,
		OutputLenDistribution: sim.DistFixed, OutputLenMean: 2})
	stopEx := &exchange{name: "generate_stop"}
	for i, u := range []string{eosSim, live.url} {
		stopEx.status[i], stopEx.body[i] = send(t, http.MethodPost, u+"/generate", map[string]any{"input_ids": prompt, "rid": "contract-stop",
			"sampling_params": map[string]any{"max_new_tokens": 8, "temperature": 0, "stop_token_ids": []int{stopID}, "skip_special_tokens": false}})
		var a struct {
			OutputIDs []int `json:"output_ids"`
			Meta      struct {
				Finish struct {
					Type    string `json:"type"`
					Matched int    `json:"matched"`
				} `json:"finish_reason"`
			} `json:"meta_info"`
		}
		_ = json.Unmarshal(stopEx.body[i], &a)
		if a.Meta.Finish.Type != "stop" || len(a.OutputIDs) == 0 || a.OutputIDs[len(a.OutputIDs)-1] != a.Meta.Finish.Matched ||
			(i == 1 && a.Meta.Finish.Matched != stopID) {
			t.Errorf("%s: a request with stop_token_ids [%d] answered %.400s: want finish stop, matched the last output id", u, stopID, stopEx.body[i])
		}
	}
	exs = append(exs, stopEx)
	// Introspection after requests ran on both (decode_moments, for one, is null until the first decode).
	both("server_info", http.MethodGet, "/server_info", nil)
	both("loads_core_memory", http.MethodGet, "/v1/loads?include=core,memory", nil)
	both("loads", http.MethodGet, "/v1/loads", nil)

	// Abort: a long request in flight, aborted by rid; its /generate answers with what it had.
	abortEx, abortReq := &exchange{name: "generate_abort"}, &exchange{name: "abort_request"}
	for i, u := range urls {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			abortEx.status[i], abortEx.body[i] = send(t, http.MethodPost, u+"/generate", map[string]any{"input_ids": prompt, "rid": "contract-abort",
				"sampling_params": map[string]any{"max_new_tokens": 1500, "temperature": 0, "ignore_eos": true}})
		}()
		testutil.WaitFor(t, time.Minute, "the request to run on "+u, func() bool {
			var l struct {
				Loads []struct {
					Running int `json:"num_running_reqs"`
				} `json:"loads"`
			}
			getJSON(t, http.MethodGet, u+"/v1/loads", nil, &l)
			return len(l.Loads) > 0 && l.Loads[0].Running > 0
		})
		abortReq.status[i], abortReq.body[i] = send(t, http.MethodPost, u+"/abort_request", map[string]any{"rid": "contract-abort"})
		wg.Wait()
	}
	exs = append(exs, abortEx, abortReq)
	for i := range urls {
		if !strings.Contains(string(abortEx.body[i]), `"abort"`) {
			t.Errorf("%s: the aborted request answered %d %.300s", urls[i], abortEx.status[i], abortEx.body[i])
		}
	}

	long := make([]int, ctxLen+10)
	for i := range long {
		long[i] = 1000 + i
	}
	tooLong := both("error_over_context", http.MethodPost, "/generate", map[string]any{"input_ids": long, "sampling_params": map[string]any{"max_new_tokens": 4}})

	// A full queue: many requests at once that the pool cannot admit together, on both; the waiting ones
	// past --max-queued-requests are refused with 503. (The simulator runs in real time here, as the server.)
	full := &exchange{name: "error_queue_full"}
	queueSim := newSim(t, base)
	for i, u := range []string{queueSim, live.url} {
		full.status[i], full.body[i] = queueFull(t, u)
	}
	exs = append(exs, full)
	if full.status[1] != http.StatusServiceUnavailable {
		t.Errorf("live server: no 503 with 40 requests for a queue of 24: %s", full.body[1])
	}

	for _, ex := range []*exchange{tooLong} {
		if ex.status != [2]int{400, 400} {
			t.Errorf("%s: HTTP %v (simulator, live), want 400: %.300s", ex.name, ex.status, ex.body[1])
		}
	}

	// Compare the shapes.
	want := map[string][]string{}
	if data, err := os.ReadFile(liveOnlyFile); err == nil {
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%s: %v", liveOnlyFile, err)
		}
	}
	got := map[string][]string{}
	expected := map[string]int{} // fields of the simulator's answers listed in simOnly, per request
	for _, ex := range exs {
		if ex.status[0] != ex.status[1] {
			t.Errorf("%s: HTTP %d from the simulator, %d from the live server (%.200s)", ex.name, ex.status[0], ex.status[1], ex.body[1])
		}
		if len(bytes.TrimSpace(ex.body[0])) == 0 || len(bytes.TrimSpace(ex.body[1])) == 0 {
			if len(bytes.TrimSpace(ex.body[0])) != len(bytes.TrimSpace(ex.body[1])) {
				t.Errorf("%s: the simulator answered %q, the live server %q", ex.name, ex.body[0], ex.body[1])
			}
			continue
		}
		var shapes [2]map[string]string
		for i := range 2 {
			var v any
			if err := json.Unmarshal(ex.body[i], &v); err != nil {
				t.Errorf("%s: %s answered no JSON: %.200s", ex.name, urls[i], ex.body[i])
				continue
			}
			shapes[i] = map[string]string{}
			shape(v, "", shapes[i])
		}
		for p, k := range shapes[0] {
			if _, ok := simOnly[ex.name+" "+p]; ok {
				expected[ex.name]++
				continue
			}
			if lk, ok := shapes[1][p]; !ok {
				t.Errorf("%s: the simulator sends %q (%s), the live server does not", ex.name, p, k)
			} else if lk != k {
				t.Errorf("%s: %q is %s from the simulator, %s from the live server", ex.name, p, k, lk)
			}
		}
		for p, k := range shapes[1] {
			if _, ok := shapes[0][p]; !ok {
				got[ex.name] = append(got[ex.name], p+" "+k)
			}
		}
		sort.Strings(got[ex.name])
	}
	t.Logf("simulator fields absent from or unlike the live answers as simOnly lists them: %v", expected)
	if os.Getenv("DRAFTFLOW_LIVE_UPDATE") != "" {
		data, _ := json.MarshalIndent(got, "", " ")
		if err := os.WriteFile(liveOnlyFile, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", liveOnlyFile)
	} else {
		for _, ex := range exs {
			added, dropped := diff(got[ex.name], want[ex.name])
			if len(added)+len(dropped) > 0 {
				t.Errorf("%s: the live server's fields beyond the simulator's drifted from %s (DRAFTFLOW_LIVE_UPDATE=1 rewrites it "+
					"once the simulator or the stage is checked against them):\n  new or changed: %v\n  gone or changed: %v",
					ex.name, filepath.Base(liveOnlyFile), added, dropped)
			}
		}
	}

	// The metric families the stage reads.
	for _, u := range urls {
		fams, err := scrape(u + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"sglang:num_retracted_reqs", "sglang:num_running_reqs", "sglang:token_usage"} {
			if _, ok := fams[name]; !ok {
				t.Errorf("%s/metrics has no %s", u, name)
			}
		}
	}
}

// queueFull sends 40 requests to u at once, more than the pool admits together and than --max-queued-requests
// (24) lets wait; once one is refused (or after a minute) it aborts them all, waits for every answer, and returns
// the first 503 answer, or a status 0 with what went wrong.
func queueFull(t *testing.T, u string) (int, []byte) {
	t.Helper()
	type ans struct {
		status int
		body   []byte
	}
	const n = 40
	res := make(chan ans, n)
	for i := range n {
		go func() {
			ids := make([]int, 300)
			for j := range ids {
				ids[j] = 2000 + 7*i + j
			}
			s, b, err := trySend(http.MethodPost, u+"/generate", map[string]any{"input_ids": ids, "rid": fmt.Sprintf("contract-queue-%02d", i),
				"sampling_params": map[string]any{"max_new_tokens": 1500, "temperature": 0, "ignore_eos": true}})
			if err != nil {
				b = []byte(err.Error())
			}
			res <- ans{s, b}
		}()
	}
	var first *ans
	timeout := time.After(time.Minute)
	got := 0
wait:
	for first == nil && got < n {
		select {
		case a := <-res:
			got++
			if a.status == http.StatusServiceUnavailable {
				first = &a
			}
		case <-timeout:
			break wait // no 503 yet: abort and drain below
		}
	}
	send(t, http.MethodPost, u+"/abort_request", map[string]any{"rid": "", "abort_all": true})
	for ; got < n; got++ { // every request answers once aborted
		select {
		case <-res:
		case <-time.After(2 * time.Minute):
			t.Errorf("%s: %d requests still unanswered two minutes after abort_all", u, n-got)
			return 0, []byte(`"unanswered"`)
		}
	}
	if first == nil {
		return 0, []byte(`"no 503"`)
	}
	return first.status, first.body
}

// diff returns the entries of got not in want, and those of want not in got.
func diff(got, want []string) (added, dropped []string) {
	for _, g := range got {
		if !slices.Contains(want, g) {
			added = append(added, g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			dropped = append(dropped, w)
		}
	}
	return added, dropped
}
