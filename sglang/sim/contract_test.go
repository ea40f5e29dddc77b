// Contract test: the simulator's HTTP surface against the real SGLang 0.5.23 source.
//
// What is pinned: sglang==0.5.23 from PyPI (and, for Config.Release's legacy
// mode, sglang==0.5.4). The test runs testdata/contract/extract.py, which
// downloads both wheels once with `python3 -m pip download --no-deps` into
// $DRAFTFLOW_CACHE/sglang/sglang-<version>/ (default ~/.cache/draftflow), opens
// them as zips and reads their Python sources with the ast module (nothing is
// installed or imported: importing sglang needs CUDA builds), and prints JSON
// facts: the LoadSnapshot fields and sections and the num_total_tokens formula
// behind /v1/loads, the keys /v1/loads and /server_info return (startup_time,
// per-rank internal_states, memory_usage), which server args are None when
// unset, the API-key exemptions and 401 body, GenerateReqInput's
// routed_dp_rank, the retraction counter and meta_info key, whether `text`
// keeps a matched stop token (DetokenizerManager.trim_matched_stop, and
// no_stop_trim's default), the routes, and what sets 0.5.4 apart. The facts are cached beside the wheel under a key made
// of both wheels' and the extractor's sha256, so a warm run costs one python3
// start. Each subtest drives a simulator (Instant mode, served by httptest)
// and compares its HTTP answers with those facts.
//
// The extractor exits 3 ("DRIFT", naming the file and symbol) when a shape it
// looks for is not in the wheel, and the test fails: drift never passes
// silently. When python3 (3.9+), pip or the network is missing it exits 2 and
// the test skips, unless DRAFTFLOW_REQUIRE_ASSETS is set (CI), where it fails.
//
// To move the pin to another SGLang release: set PIN (or LEGACY) in
// testdata/contract/extract.py and contractPin below, run
//
//	go test ./sglang/sim -run TestContractSGLang -v
//
// fix extract.py where it reports DRIFT (read the new source where the message
// points), then the simulator where a subtest fails, and rename
// TestContractSGLang0523 after the new release.

package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testassets"
)

// contractPin is the SGLang release the simulator is pinned to; it must match
// PIN in testdata/contract/extract.py.
const contractPin = "0.5.23"

// contractFacts is the part of extract.py's JSON the test reads.
type contractFacts struct {
	SGLangVersion string `json:"sglang_version"`
	Provenance    struct {
		Pin               string `json:"pin"`
		Wheel             string `json:"wheel"`
		WheelSHA256       string `json:"wheel_sha256"`
		Legacy            string `json:"legacy"`
		LegacyWheelSHA256 string `json:"legacy_wheel_sha256"`
		ExtractorSHA256   string `json:"extractor_sha256"`
	} `json:"provenance"`
	LoadSnapshot struct {
		Fields []struct {
			Name       string  `json:"name"`
			Annotation string  `json:"annotation"`
			Default    *string `json:"default"`
		} `json:"fields"`
		CoreKeys            []string          `json:"core_keys"`
		SectionFields       []string          `json:"section_fields"`
		ValidSections       []string          `json:"valid_sections"`
		SectionIncludeNames map[string]string `json:"section_include_names"`
		Sections            map[string]struct {
			Struct string   `json:"struct"`
			Fields []string `json:"fields"`
		} `json:"sections"`
	} `json:"load_snapshot"`
	LoadInquirer struct {
		Formula           string            `json:"num_total_tokens_formula"`
		PendingQueues     string            `json:"pending_token_queues"`
		UsedPlusWaiting   bool              `json:"num_total_tokens_is_used_plus_waiting_seqlen"`
		ActiveEqualsTotal bool              `json:"num_active_tokens_equals_total_outside_pd"`
		SectionPresence   map[string]string `json:"section_presence"`
	} `json:"load_inquirer"`
	V1Loads struct {
		TopLevelKeys     []string `json:"top_level_keys"`
		QueryParams      []string `json:"query_params"`
		OutOfRangeDPRank string   `json:"out_of_range_dp_rank"`
	} `json:"v1_loads"`
	HTTPServer struct {
		ServerInfoKeys   []string          `json:"server_info_keys"`
		ServerInfoValues map[string]string `json:"server_info_values"`
	} `json:"http_server"`
	BuildServerInfo struct {
		AddedKeys    []string `json:"added_keys"`
		MetricsMount struct {
			Path         string `json:"path"`
			PathRegex    string `json:"path_regex"`
			Multiprocess bool   `json:"multiprocess"`
		} `json:"metrics_mount"`
	} `json:"build_server_info"`
	InitInfo map[string]struct {
		Always      []string `json:"always"`
		Conditional []string `json:"conditional"`
	} `json:"init_info"`
	InternalState struct {
		Base              string   `json:"base"`
		UnconditionalKeys []string `json:"unconditional_keys"`
		GuardedKeys       []string `json:"guarded_keys"`
	} `json:"internal_state"`
	MemoryUsage struct {
		Keys []string `json:"keys"`
	} `json:"memory_usage"`
	GraphPhaseKeys []string `json:"graph_phase_keys"`
	StartupTime    struct {
		SchedulerKeys []string `json:"scheduler_keys"`
		EngineKeys    []string `json:"engine_keys"`
		AggregatedBy  string   `json:"engine_aggregates_ranks_by"`
	} `json:"startup_time"`
	ServerArgs map[string]struct {
		Module        string `json:"module"`
		Record        string `json:"record"`
		Type          string `json:"type"`
		Default       any    `json:"default"`
		Resolvable    bool   `json:"resolvable"`
		NullWhenUnset bool   `json:"null_when_unset"`
	} `json:"server_args"`
	Auth struct {
		AlwaysAllowedPrefixes []string                     `json:"always_allowed_prefixes"`
		BearerCaseInsensitive bool                         `json:"bearer_scheme_case_insensitive"`
		ErrorBodies           map[string]map[string]string `json:"error_bodies"`
		LevelsRequiringAPIKey []string                     `json:"levels_requiring_api_key"`
		AbortRequestAuthLevel string                       `json:"abort_request_auth_level"`
	} `json:"auth"`
	GenerateReqInput struct {
		Fields          []string `json:"fields"`
		RoutedDPRank    bool     `json:"routed_dp_rank"`
		DeprecatedAlias bool     `json:"data_parallel_rank_deprecated_alias"`
		OutOfRangeError string   `json:"routed_dp_rank_out_of_range_error"`
		IgnoredWhen     string   `json:"routed_dp_rank_ignored_when"`
		DupInRequest    string   `json:"duplicate_rid_in_request_error"`
		DupInFlight     string   `json:"duplicate_rid_in_flight_error"`
	} `json:"generate_req_input"`
	Retraction struct {
		Counter          string   `json:"counter"`
		Kind             string   `json:"kind"`
		Labelled         bool     `json:"labelled"`
		MetaInfoKey      string   `json:"meta_info_key"`
		MetaInfoBaseKeys []string `json:"meta_info_base_keys"`
	} `json:"retraction"`
	StopTrim struct {
		DropsMatchedToken bool   `json:"text_drops_matched_stop_token"`
		NoStopTrimKeeps   bool   `json:"no_stop_trim_keeps"`
		NoStopTrimDefault string `json:"no_stop_trim_default"`
	} `json:"stop_trim"`
	Routes map[string]struct {
		Methods   []string `json:"methods"`
		AuthLevel string   `json:"auth_level"`
		Mount     *struct {
			Path string `json:"path"`
		} `json:"mount"`
	} `json:"routes"`
	// Legacy: the older release the simulator also imitates (Config.Release).
	Legacy struct {
		Version               string   `json:"version"`
		Routes                []string `json:"routes"`
		HasV1Loads            bool     `json:"has_v1_loads"`
		HasServerInfo         bool     `json:"has_server_info"`
		HasRetractionCounter  bool     `json:"has_retraction_counter"`
		MetricNames           []string `json:"metric_names"`
		MetaInfoBaseKeys      []string `json:"meta_info_base_keys"`
		AlwaysAllowedPrefixes []string `json:"always_allowed_prefixes"`
		BearerCaseInsensitive bool     `json:"bearer_scheme_case_insensitive"`
		ChecksDuplicateRIDs   bool     `json:"checks_duplicate_rids"`
	} `json:"legacy"`
}

// contractCacheDir is where extract.py keeps the SGLang wheels.
func contractCacheDir() string { return filepath.Join(testassets.CacheDir(), "sglang") }

// loadContractFacts runs the extractor (cached: a few hundred ms warm).
func loadContractFacts(t *testing.T) *contractFacts {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		testassets.Unavailable(t, "python3 not found: %v", err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "contract", "extract.py"), "--cache", contractCacheDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 2:
		testassets.Unavailable(t, "%s", strings.TrimSpace(stderr.String()))
	case err != nil:
		t.Fatalf("extract.py: %v\n%s", err, stderr.String())
	}
	var f contractFacts
	if err := json.Unmarshal(stdout.Bytes(), &f); err != nil {
		t.Fatalf("extract.py printed no facts: %v\n%s", err, stdout.String())
	}
	if f.Provenance.Pin != contractPin || f.SGLangVersion != contractPin {
		t.Fatalf("extract.py is pinned to %q (wheel says %q), contract_test.go to %q", f.Provenance.Pin, f.SGLangVersion, contractPin)
	}
	if f.Legacy.Version == "" || f.Legacy.Version != f.Provenance.Legacy {
		t.Fatalf("extract.py gave no facts for the legacy release (%q)", f.Provenance.Legacy)
	}
	t.Logf("SGLang %s facts from %s (sha256 %.16s…), legacy %s", f.SGLangVersion, f.Provenance.Wheel, f.Provenance.WheelSHA256, f.Legacy.Version)
	return &f
}

// ---------------------------------------------------------------------------
// simulator plumbing

type contractSim struct {
	t   *testing.T
	s   *Server
	url string
	key string // bearer sent by default (APIKey of the sim)
}

var contractClient = &http.Client{Timeout: 60 * time.Second}

func newContractSim(t *testing.T, cfg Config) *contractSim {
	t.Helper()
	cfg.Instant = true
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close() // first: it ends requests parked in a paused scheduler, which ts.Close waits for
		ts.Close()
	})
	return &contractSim{t: t, s: s, url: ts.URL, key: cfg.APIKey}
}

// do sends a request with the given Authorization header ("" for none) and
// returns the status and body.
func (c *contractSim) do(method, path, auth string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := contractClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, data
}

func (c *contractSim) bearer() string {
	if c.key == "" {
		return ""
	}
	return "Bearer " + c.key
}

// getJSON GETs path (with the sim's key) and decodes a JSON object.
func (c *contractSim) getJSON(path string) map[string]any {
	c.t.Helper()
	status, data := c.do(http.MethodGet, path, c.bearer(), nil)
	if status != http.StatusOK {
		c.t.Fatalf("GET %s: status %d: %.300s", path, status, data)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		c.t.Fatalf("GET %s: not a JSON object: %v: %.300s", path, err, data)
	}
	return m
}

func (c *contractSim) loads(query string) (top map[string]any, entries []map[string]any) {
	c.t.Helper()
	top = c.getJSON("/v1/loads" + query)
	raw, ok := top["loads"].([]any)
	if !ok {
		c.t.Fatalf("/v1/loads%s: loads is %T, not a list", query, top["loads"])
	}
	for i, e := range raw {
		m, ok := e.(map[string]any)
		if !ok {
			c.t.Fatalf("/v1/loads%s: loads[%d] is %T, not an object", query, i, e)
		}
		entries = append(entries, m)
	}
	return top, entries
}

// paused stops the sim's scheduler so that submitted requests stay queued.
func (c *contractSim) pause(on bool) {
	c.t.Helper()
	path := "/continue_generation"
	if on {
		path = "/pause_generation"
	}
	if status, data := c.do(http.MethodPost, path, c.bearer(), map[string]any{}); status != http.StatusOK {
		c.t.Fatalf("POST %s: %d %s", path, status, data)
	}
}

// submit sends /generate calls in the background; wait collects their answers.
type contractBatch struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	results []contractResult
}

type contractResult struct {
	status int
	body   []byte
	err    error
}

func (c *contractSim) submit(bodies []map[string]any) *contractBatch {
	b := &contractBatch{}
	auth := c.bearer()
	for _, body := range bodies {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			data, _ := json.Marshal(body)
			req, _ := http.NewRequest(http.MethodPost, c.url+"/generate", bytes.NewReader(data))
			req.Header.Set("Content-Type", "application/json")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			var r contractResult
			resp, err := contractClient.Do(req)
			if err != nil {
				r.err = err
			} else {
				r.status = resp.StatusCode
				r.body, r.err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			b.mu.Lock()
			b.results = append(b.results, r)
			b.mu.Unlock()
		}()
	}
	return b
}

func (b *contractBatch) wait(t *testing.T) []contractResult {
	t.Helper()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("/generate calls did not finish within 90 s")
	}
	return b.results
}

// eventually polls cond every few ms for up to 20 s.
func contractEventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s (last: %s)", what, last)
}

func contractPrompt(rng *rand.Rand, n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 1000 + rng.IntN(100000)
	}
	return ids
}

func contractGenBody(input []int, maxNew int, extra map[string]any) map[string]any {
	b := map[string]any{
		"input_ids":       input,
		"sampling_params": map[string]any{"max_new_tokens": maxNew, "ignore_eos": true, "temperature": 0},
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// ---------------------------------------------------------------------------
// JSON helpers

func contractKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// contractDiff returns the elements of want missing from got and the elements
// of got absent from want.
func contractDiff(got, want []string) (missing, extra []string) {
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	return missing, extra
}

func contractNum(t *testing.T, where string, v any) float64 {
	t.Helper()
	f, ok := v.(float64)
	if !ok {
		t.Errorf("%s = %v (%T), want a number", where, v, v)
		return math.NaN()
	}
	return f
}

func contractInt(t *testing.T, where string, v any) int {
	t.Helper()
	f := contractNum(t, where, v)
	if f != math.Trunc(f) {
		t.Errorf("%s = %v, want an integer", where, f)
	}
	return int(f)
}

func contractObject(t *testing.T, where string, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s = %v (%T), want an object", where, v, v)
	}
	return m
}

// ---------------------------------------------------------------------------
// the test

func TestContractSGLang0523(t *testing.T) {
	start := time.Now()
	facts := loadContractFacts(t)
	t.Logf("facts ready in %v", time.Since(start).Round(time.Millisecond))

	t.Run("Facts", func(t *testing.T) { contractCheckFacts(t, facts) })
	t.Run("Routes", func(t *testing.T) { contractRoutes(t, facts) })
	t.Run("V1LoadsShape", func(t *testing.T) {
		t.Run("dp1", func(t *testing.T) { contractLoadsShape(t, facts, 1) })
		t.Run("dp2", func(t *testing.T) { contractLoadsShape(t, facts, 2) })
	})
	t.Run("V1LoadsNumTotalTokens", func(t *testing.T) {
		t.Run("dp1", func(t *testing.T) { contractNumTotalTokens(t, facts, 1) })
		t.Run("dp2", func(t *testing.T) { contractNumTotalTokens(t, facts, 2) })
	})
	t.Run("ServerInfo", func(t *testing.T) {
		t.Run("dp1-unset", func(t *testing.T) { contractServerInfo(t, facts, 1, false) })
		t.Run("dp1-set", func(t *testing.T) { contractServerInfo(t, facts, 1, true) })
		t.Run("dp2-unset", func(t *testing.T) { contractServerInfo(t, facts, 2, false) })
		t.Run("dp2-set", func(t *testing.T) { contractServerInfo(t, facts, 2, true) })
	})
	t.Run("ServerInfoMergedKeys", func(t *testing.T) {
		t.Run("dp1", func(t *testing.T) { contractServerInfoMerged(t, facts, 1) })
		t.Run("dp2", func(t *testing.T) { contractServerInfoMerged(t, facts, 2) })
	})
	t.Run("APIKey", func(t *testing.T) { contractAuth(t, facts) })
	t.Run("RoutedDPRank", func(t *testing.T) { contractRoutedDPRank(t, facts) })
	t.Run("DuplicateRID", func(t *testing.T) { contractDuplicateRID(t, facts) })
	t.Run("Retraction", func(t *testing.T) { contractRetraction(t, facts) })
	t.Run("StopTrim", func(t *testing.T) { contractStopTrim(t, facts) })
	t.Run("LegacyRelease", func(t *testing.T) { contractLegacy(t, facts) })
}

// contractCheckFacts asserts the facts the other subtests rely on, so a wheel
// whose shape changed under the extractor is reported here by name.
func contractCheckFacts(t *testing.T, f *contractFacts) {
	if !f.LoadInquirer.UsedPlusWaiting {
		t.Errorf("num_total_tokens is no longer num_used_tokens + waiting seqlen: %s", f.LoadInquirer.Formula)
	}
	if !f.LoadInquirer.ActiveEqualsTotal {
		t.Error("num_active_tokens is no longer num_total_tokens outside PD disaggregation")
	}
	t.Logf("%s  (%s)", f.LoadInquirer.Formula, f.LoadInquirer.PendingQueues)
	if len(f.LoadSnapshot.CoreKeys) == 0 || len(f.V1Loads.TopLevelKeys) == 0 {
		t.Error("no LoadSnapshot core keys or /v1/loads keys")
	}
	for _, k := range []string{"startup_time", "internal_states", "version"} {
		if !slices.Contains(f.HTTPServer.ServerInfoKeys, k) {
			t.Errorf("/server_info no longer adds %q: %v", k, f.HTTPServer.ServerInfoKeys)
		}
	}
	for _, k := range []string{"effective_max_running_requests_per_dp", "memory_usage", "startup_time", "last_gen_throughput"} {
		if !slices.Contains(f.InternalState.UnconditionalKeys, k) {
			t.Errorf("internal_states entries no longer always carry %q: %v", k, f.InternalState.UnconditionalKeys)
		}
	}
	if !slices.Contains(f.MemoryUsage.Keys, "token_capacity") {
		t.Errorf("memory_usage has no token_capacity: %v", f.MemoryUsage.Keys)
	}
	for _, k := range []string{"max_running_requests", "context_length"} {
		a, ok := f.ServerArgs[k]
		if !ok || !a.NullWhenUnset {
			t.Errorf("server arg %s is no longer None when unset: %+v", k, a)
		}
	}
	if d := f.ServerArgs["dp_size"]; d.Default != float64(1) || d.NullWhenUnset {
		t.Errorf("server arg dp_size default %v (null when unset %v), want 1", d.Default, d.NullWhenUnset)
	}
	if body := f.Auth.ErrorBodies["401"]; body["error"] != "Unauthorized" || len(body) != 1 {
		t.Errorf(`401 body is %v, not {"error":"Unauthorized"}`, body)
	}
	if !f.GenerateReqInput.RoutedDPRank || !f.GenerateReqInput.DeprecatedAlias {
		t.Error("GenerateReqInput lost routed_dp_rank or its data_parallel_rank alias")
	}
	if f.Retraction.Counter != "sglang:num_retracted_requests_total" || f.Retraction.Kind != "Counter" || !f.Retraction.Labelled {
		t.Errorf("retraction counter %+v", f.Retraction)
	}
	if f.Retraction.MetaInfoKey != "num_retractions" {
		t.Errorf("meta_info retraction key is %q", f.Retraction.MetaInfoKey)
	}
	for _, r := range []string{"/generate", "/health", "/server_info", "/get_server_info", "/v1/loads", "/abort_request", "/metrics"} {
		if _, ok := f.Routes[r]; !ok {
			t.Errorf("route %s not found in the source", r)
		}
	}
	if m := f.Routes["/metrics"].Mount; m == nil || m.Path != "/metrics" {
		t.Errorf("/metrics is not a mount: %+v", f.Routes["/metrics"])
	}
	if f.Auth.AbortRequestAuthLevel != "ADMIN_OPTIONAL" || !slices.Contains(f.Auth.LevelsRequiringAPIKey, "ADMIN_OPTIONAL") ||
		!slices.Contains(f.Auth.LevelsRequiringAPIKey, "NORMAL") {
		t.Errorf("auth levels: /abort_request %s, levels needing --api-key %v", f.Auth.AbortRequestAuthLevel, f.Auth.LevelsRequiringAPIKey)
	}
}

// contractRoutes: every route the generate stage uses answers with the
// methods the real server declares.
func contractRoutes(t *testing.T, f *contractFacts) {
	c := newContractSim(t, Config{MaxTotalTokens: 20000})
	rng := rand.New(rand.NewPCG(1, 2))
	for path, r := range f.Routes {
		methods := r.Methods
		if r.Mount != nil {
			methods = []string{http.MethodGet}
		}
		for _, m := range methods {
			var body any
			switch path {
			case "/generate":
				body = contractGenBody(contractPrompt(rng, 8), 2, nil)
			case "/abort_request":
				body = map[string]any{"rid": "no-such-request"}
			}
			status, data := c.do(m, path, "", body)
			if status != http.StatusOK {
				t.Errorf("%s %s: status %d, want 200 (route declared in %s): %.200s", m, path, status, contractPin, data)
			}
		}
	}
	// /get_server_info is an alias of /server_info
	a, b := c.getJSON("/server_info"), c.getJSON("/get_server_info")
	if ka, kb := contractKeys(a), contractKeys(b); !slices.Equal(ka, kb) {
		t.Errorf("/get_server_info keys differ from /server_info: %v vs %v", kb, ka)
	}
	// /metrics is a Mount whose regex also matches /metrics/...
	if f.BuildServerInfo.MetricsMount.PathRegex == "^/metrics(?P<path>.*)$" {
		if status, _ := c.do(http.MethodGet, "/metrics/", "", nil); status != http.StatusOK {
			t.Errorf("GET /metrics/: status %d, want 200 (mounted with path_regex %s)", status, f.BuildServerInfo.MetricsMount.PathRegex)
		}
	}
}

// contractCheckEntry checks one /v1/loads entry against LoadSnapshot.to_dict:
// its keys and sections for the given ?include= (nil: all), and when deep
// the value types and the invariants between fields.
func contractCheckEntry(t *testing.T, f *contractFacts, where string, e map[string]any, include []string, deep bool) {
	t.Helper()
	ls := f.LoadSnapshot
	keys := contractKeys(e)
	missing, _ := contractDiff(keys, ls.CoreKeys)
	if len(missing) > 0 {
		t.Errorf("%s: core keys missing: %v", where, missing)
	}
	allowed := append(slices.Clone(ls.CoreKeys), ls.SectionFields...)
	if _, extra := contractDiff(keys, allowed); len(extra) > 0 {
		t.Errorf("%s: keys the real LoadSnapshot.to_dict never returns: %v", where, extra)
	}
	wantSection := func(field string) bool {
		if include == nil || slices.Contains(include, "all") {
			return true
		}
		return slices.Contains(include, ls.SectionIncludeNames[field])
	}
	for _, field := range ls.SectionFields {
		v, present := e[field]
		presence := f.LoadInquirer.SectionPresence[field]
		switch {
		case !wantSection(field):
			if present {
				t.Errorf("%s: section %q returned though include=%v leaves it out", where, field, include)
			}
			continue
		case presence == "conditional":
			// speculative / LoRA: None unless the server runs them; the sim runs neither.
			if present {
				t.Errorf("%s: section %q present; SGLang sets it only with speculative decoding / LoRA", where, field)
			}
			continue
		case !present:
			t.Errorf("%s: section %q missing (get_loads fills it %s)", where, field, presence)
			continue
		}
		sec := contractObject(t, where+"."+field, v)
		if sec == nil {
			continue
		}
		if m, x := contractDiff(contractKeys(sec), ls.Sections[field].Fields); deep && (len(m) > 0 || len(x) > 0) {
			t.Errorf("%s.%s: keys missing %v, not in %s %v", where, field, m, ls.Sections[field].Struct, x)
		}
	}
	if !deep {
		return
	}
	// field types from the LoadSnapshot annotations
	for _, fd := range ls.Fields {
		v, ok := e[fd.Name]
		if !ok {
			continue
		}
		switch fd.Annotation {
		case "int":
			contractInt(t, where+"."+fd.Name, v)
		case "float":
			contractNum(t, where+"."+fd.Name, v)
		case "Optional[list[float]]":
			if _, isList := v.([]any); v != nil && !isList {
				t.Errorf("%s.%s = %v, want null or a list", where, fd.Name, v)
			}
		}
	}
	if f.LoadInquirer.ActiveEqualsTotal && e["num_active_tokens"] != e["num_total_tokens"] {
		t.Errorf("%s: num_active_tokens %v != num_total_tokens %v (equal outside PD disaggregation)", where, e["num_active_tokens"], e["num_total_tokens"])
	}
	if d, ok := e["disaggregation"].(map[string]any); ok && d["mode"] != "null" {
		t.Errorf(`%s: disaggregation.mode = %v, want "null" (no PD disaggregation)`, where, d["mode"])
	}
	if q, ok := e["queues"].(map[string]any); ok && q["waiting"] != e["num_waiting_reqs"] {
		t.Errorf("%s: queues.waiting %v != num_waiting_reqs %v (both len(waiting_queue) outside PD)", where, q["waiting"], e["num_waiting_reqs"])
	}
	if m, ok := e["memory"].(map[string]any); ok && m["token_capacity"] != e["max_total_num_tokens"] {
		t.Errorf("%s: memory.token_capacity %v != max_total_num_tokens %v", where, m["token_capacity"], e["max_total_num_tokens"])
	}
}

func contractLoadsShape(t *testing.T, f *contractFacts, dp int) {
	c := newContractSim(t, Config{MaxTotalTokens: 20000, DPSize: dp})
	// some traffic, so throughput and decode moments are live
	rng := rand.New(rand.NewPCG(3, 4))
	var bodies []map[string]any
	for i := 0; i < 4; i++ {
		bodies = append(bodies, contractGenBody(contractPrompt(rng, 64), 16, nil))
	}
	for _, r := range c.submit(bodies).wait(t) {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("/generate: %v %d %.200s", r.err, r.status, r.body)
		}
	}

	top, entries := c.loads("")
	if m, x := contractDiff(contractKeys(top), f.V1Loads.TopLevelKeys); len(m) > 0 || len(x) > 0 {
		t.Errorf("/v1/loads top level: missing %v, keys the real one lacks %v (real: %v)", m, x, f.V1Loads.TopLevelKeys)
	}
	if v, _ := top["version"].(string); !strings.HasPrefix(v, f.SGLangVersion) {
		t.Errorf("/v1/loads version %q, the real one reports __version__ %q", top["version"], f.SGLangVersion)
	}
	if a := top["accelerator"]; a != nil {
		if _, ok := a.(string); !ok {
			t.Errorf("accelerator = %v (%T), want a string or null", a, a)
		}
	}
	if v, ok := top["num_accelerators"]; ok {
		contractInt(t, "num_accelerators", v)
	}
	if len(entries) != dp {
		t.Fatalf("/v1/loads has %d entries, want one per DP rank (%d)", len(entries), dp)
	}
	for i, e := range entries {
		contractCheckEntry(t, f, fmt.Sprintf("loads[%d]", i), e, nil, true)
		if r, ok := e["dp_rank"].(float64); !ok || int(r) != i {
			t.Errorf("loads[%d].dp_rank = %v", i, e["dp_rank"])
		}
	}

	// ?include= selects sections like LoadSnapshot.to_dict(include); only
	// the selection is checked here, the entries themselves above.
	for _, inc := range [][]string{{"core"}, {"queues"}, {"memory", "disagg"}, {"all"}} {
		q := "?include=" + strings.Join(inc, ",")
		_, es := c.loads(q)
		if len(es) != dp {
			t.Errorf("/v1/loads%s: %d entries, want %d", q, len(es), dp)
		}
		for i, e := range es {
			var sections []string
			for _, k := range contractKeys(e) {
				if slices.Contains(f.LoadSnapshot.SectionFields, k) {
					sections = append(sections, k)
				}
			}
			var want []string
			for _, field := range f.LoadSnapshot.SectionFields {
				if f.LoadInquirer.SectionPresence[field] != "conditional" &&
					(slices.Contains(inc, "all") || slices.Contains(inc, f.LoadSnapshot.SectionIncludeNames[field])) {
					want = append(want, field)
				}
			}
			if !slices.Equal(sections, want) {
				t.Errorf("/v1/loads%s: loads[%d] has sections %v, want %v", q, i, sections, want)
			}
		}
	}
	// ?dp_rank= filters; out of range gives no entries
	for r := 0; r < dp; r++ {
		_, es := c.loads(fmt.Sprintf("?dp_rank=%d", r))
		if len(es) != 1 || es[0]["dp_rank"] != float64(r) {
			t.Errorf("?dp_rank=%d: %d entries %v", r, len(es), es)
		}
	}
	if f.V1Loads.OutOfRangeDPRank == "[]" {
		for _, r := range []int{dp, -1} {
			if _, es := c.loads(fmt.Sprintf("?dp_rank=%d", r)); len(es) != 0 {
				t.Errorf("?dp_rank=%d with %d ranks: %d entries, want none (loads: [])", r, dp, len(es))
			}
		}
	}
}

// contractNumTotalTokens: num_total_tokens = num_used_tokens + the seqlen of
// every waiting request, so a backed-up queue pushes it past the pool size.
func contractNumTotalTokens(t *testing.T, f *contractFacts, dp int) {
	const pool, inLen, n = 4000, 1000, 10 // 10 x 1000 queued tokens on a 4000-token pool
	c := newContractSim(t, Config{MaxTotalTokens: pool, DisableRadixCache: true, DPSize: dp})
	rng := rand.New(rand.NewPCG(5, 6))
	c.pause(true)
	var bodies []map[string]any
	for i := 0; i < n; i++ {
		bodies = append(bodies, contractGenBody(contractPrompt(rng, inLen), 4, nil))
	}
	batch := c.submit(bodies)
	waitingSum := func(es []map[string]any) int {
		s := 0
		for _, e := range es {
			if w, ok := e["num_waiting_reqs"].(float64); ok {
				s += int(w)
			}
		}
		return s
	}
	var entries []map[string]any
	contractEventually(t, fmt.Sprintf("%d queued requests on /v1/loads", n), func() (bool, string) {
		_, entries = c.loads("")
		return waitingSum(entries) == n, fmt.Sprintf("num_waiting_reqs sum %d", waitingSum(entries))
	})
	over := false
	for i, e := range entries {
		where := fmt.Sprintf("loads[%d] (paused, %d requests of %d tokens queued)", i, n, inLen)
		used := contractInt(t, where+".num_used_tokens", e["num_used_tokens"])
		total := contractInt(t, where+".num_total_tokens", e["num_total_tokens"])
		waiting := contractInt(t, where+".num_waiting_reqs", e["num_waiting_reqs"])
		maxTotal := contractInt(t, where+".max_total_num_tokens", e["max_total_num_tokens"])
		if want := used + waiting*inLen; total != want {
			t.Errorf("%s: num_total_tokens %d, want num_used_tokens %d + %d waiting x seqlen %d = %d  [%s]",
				where, total, used, waiting, inLen, want, f.LoadInquirer.Formula)
		}
		if maxTotal != pool {
			t.Errorf("%s: max_total_num_tokens %d, want the pool %d", where, maxTotal, pool)
		}
		if total > maxTotal {
			over = true
		}
		if e["num_active_tokens"] != e["num_total_tokens"] {
			t.Errorf("%s: num_active_tokens %v != num_total_tokens %d", where, e["num_active_tokens"], total)
		}
		if q, ok := e["queues"].(map[string]any); !ok || q["waiting"] != float64(waiting) {
			t.Errorf("%s: queues = %v, want waiting %d", where, e["queues"], waiting)
		}
	}
	if !over {
		t.Errorf("num_total_tokens never exceeded max_total_num_tokens with %d x %d tokens queued on a %d-token pool", n, inLen, pool)
	}
	c.pause(false)
	for _, r := range batch.wait(t) {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("/generate: %v %d %.200s", r.err, r.status, r.body)
		}
	}
	// every request answered: nothing waits, so the total is what is in use
	_, entries = c.loads("")
	for i, e := range entries {
		if e["num_waiting_reqs"] != float64(0) || e["num_total_tokens"] != e["num_used_tokens"] {
			t.Errorf("loads[%d] after the queue drained: num_waiting_reqs %v, num_total_tokens %v, num_used_tokens %v (want 0 and total == used)",
				i, e["num_waiting_reqs"], e["num_total_tokens"], e["num_used_tokens"])
		}
	}
}

// contractServerInfo: /server_info keys, startup_time, per-rank
// internal_states, and the server args that are None unless given.
func contractServerInfo(t *testing.T, f *contractFacts, dp int, set bool) {
	const maxRunning, ctxLen = 48, 32768
	cfg := Config{MaxTotalTokens: 20000, DPSize: dp}
	if set {
		cfg.MaxRunningRequests, cfg.ContextLength = maxRunning, ctxLen
	}
	c := newContractSim(t, cfg)
	info := c.getJSON("/server_info")

	missing, _ := contractDiff(contractKeys(info), f.HTTPServer.ServerInfoKeys)
	if len(missing) > 0 {
		t.Errorf("/server_info lacks %v (added by http_server.server_info beside the server args)", missing)
	}
	for k, lit := range f.HTTPServer.ServerInfoValues {
		// a Python string literal in the source: the value is fixed
		if len(lit) >= 2 && lit[0] == '\'' && lit[len(lit)-1] == '\'' && !strings.ContainsAny(lit[1:len(lit)-1], "'\\") {
			if s := lit[1 : len(lit)-1]; info[k] != s {
				t.Errorf("/server_info %s = %v, the real server sends %q", k, info[k], s)
			}
		}
	}
	if v, _ := info["version"].(string); !strings.HasPrefix(v, f.SGLangVersion) {
		t.Errorf("/server_info version %q, the real one reports __version__ %q", info["version"], f.SGLangVersion)
	}
	pool := contractInt(t, "max_total_num_tokens", info["max_total_num_tokens"])

	// startup_time: build_engine_startup_time
	if st := contractObject(t, "/server_info startup_time", info["startup_time"]); st != nil {
		if m, x := contractDiff(contractKeys(st), f.StartupTime.EngineKeys); len(m) > 0 || len(x) > 0 {
			t.Errorf("startup_time keys: missing %v, extra %v (real: %v)", m, x, f.StartupTime.EngineKeys)
		}
		contractGraphKeys(t, f, "startup_time.cuda_graph", st["cuda_graph"])
	}

	// the engine's startup_time is the max of the ranks' (the critical path)
	if st, ok := info["startup_time"].(map[string]any); ok && f.StartupTime.AggregatedBy == "max" {
		if states, ok := info["internal_states"].([]any); ok {
			for _, k := range f.StartupTime.SchedulerKeys {
				if k == "cuda_graph" {
					continue
				}
				top, ok := st[k].(float64)
				if !ok {
					t.Errorf("startup_time.%s = %v, want a number", k, st[k])
					continue
				}
				max := math.Inf(-1)
				for _, s := range states {
					if rs, ok := s.(map[string]any)["startup_time"].(map[string]any); ok {
						if v, ok := rs[k].(float64); ok {
							max = math.Max(max, v)
						}
					}
				}
				if top != max {
					t.Errorf("startup_time.%s = %v, want the max over internal_states[*].startup_time.%s = %v", k, top, k, max)
				}
			}
		}
	}

	// server args: null unless given
	for _, name := range []string{"max_running_requests", "context_length"} {
		arg := f.ServerArgs[name]
		var want any
		if set {
			want = float64(map[string]int{"max_running_requests": maxRunning, "context_length": ctxLen}[name])
		} else if !arg.NullWhenUnset {
			continue
		}
		if v, ok := info[name]; !ok || v != want {
			t.Errorf("/server_info %s = %v (present %v), want %v (%s.%s defaults to %v)", name, v, ok, want, arg.Record, name, arg.Default)
		}
	}
	if v := info["dp_size"]; v != float64(dp) {
		t.Errorf("/server_info dp_size = %v, want %d", v, dp)
	}

	// internal_states: one entry per DP rank
	states, ok := info["internal_states"].([]any)
	if !ok {
		t.Fatalf("internal_states = %T, want a list", info["internal_states"])
	}
	if len(states) != dp {
		t.Errorf("internal_states has %d entries, want one per DP rank (%d)", len(states), dp)
	}
	for i, s := range states {
		where := fmt.Sprintf("internal_states[%d]", i)
		st := contractObject(t, where, s)
		if st == nil {
			continue
		}
		if m, _ := contractDiff(contractKeys(st), f.InternalState.UnconditionalKeys); len(m) > 0 {
			t.Errorf("%s lacks %v (set unconditionally by SchedulerInternalStateController)", where, m)
		}
		if v, ok := st["effective_max_running_requests_per_dp"]; ok {
			eff := contractInt(t, where+".effective_max_running_requests_per_dp", v)
			if eff <= 0 || (set && eff != maxRunning) {
				t.Errorf("%s.effective_max_running_requests_per_dp = %d, want > 0 (and %d when --max-running-requests is %d)", where, eff, maxRunning, maxRunning)
			}
		}
		if v, ok := st["last_gen_throughput"]; ok {
			contractNum(t, where+".last_gen_throughput", v)
		}
		if ts, ok := st["startup_time"].(map[string]any); ok {
			if m, x := contractDiff(contractKeys(ts), f.StartupTime.SchedulerKeys); len(m) > 0 || len(x) > 0 {
				t.Errorf("%s.startup_time keys: missing %v, extra %v (real: %v)", where, m, x, f.StartupTime.SchedulerKeys)
			}
			contractGraphKeys(t, f, where+".startup_time.cuda_graph", ts["cuda_graph"])
		}
		if mu, ok := st["memory_usage"].(map[string]any); ok {
			if m, x := contractDiff(contractKeys(mu), f.MemoryUsage.Keys); len(m) > 0 || len(x) > 0 {
				t.Errorf("%s.memory_usage keys: missing %v, not in build_memory_usage %v", where, m, x)
			}
			if tc, ok := mu["token_capacity"]; ok && contractInt(t, where+".memory_usage.token_capacity", tc) != pool {
				t.Errorf("%s.memory_usage.token_capacity %v != max_total_num_tokens %d", where, tc, pool)
			}
			if g, ok := mu["graph"]; ok {
				contractGraphKeys(t, f, where+".memory_usage.graph", g)
			}
		}
		// every entry starts from the resolved server args
		if strings.Contains(f.InternalState.Base, "resolved_server_args_dict") {
			for _, name := range []string{"max_running_requests", "context_length", "dp_size"} {
				if _, ok := st[name]; !ok {
					t.Errorf("%s lacks server arg %s (entries start from %s)", where, name, f.InternalState.Base)
				}
			}
			if !set && st["max_running_requests"] != nil {
				t.Errorf("%s.max_running_requests = %v, want null (the resolved server arg; the effective value is effective_max_running_requests_per_dp)", where, st["max_running_requests"])
			}
		}
	}
}

// contractServerInfoMerged: the keys /server_info gets from build_server_info
// (launch_command, kv_events) and from the scheduler's (or, with DP, the DP
// controller's) init info, merged over the server args.
func contractServerInfoMerged(t *testing.T, f *contractFacts, dp int) {
	info := newContractSim(t, Config{MaxTotalTokens: 20000, DPSize: dp}).getJSON("/server_info")
	if m, _ := contractDiff(contractKeys(info), f.BuildServerInfo.AddedKeys); len(m) > 0 {
		t.Errorf("/server_info lacks %v (added by build_server_info)", m)
	}
	from, initKeys := "Scheduler", f.InitInfo["scheduler"].Always
	if dp > 1 {
		from, initKeys = "DataParallelController", f.InitInfo["data_parallel_controller"].Always
	}
	if m, _ := contractDiff(contractKeys(info), initKeys); len(m) > 0 {
		t.Errorf("/server_info lacks %v (%s.get_init_info, merged in by build_server_info)", m, from)
	}
}

func contractGraphKeys(t *testing.T, f *contractFacts, where string, v any) {
	t.Helper()
	g := contractObject(t, where, v)
	if g == nil {
		return
	}
	if m, x := contractDiff(contractKeys(g), f.GraphPhaseKeys); len(m) > 0 || len(x) > 0 {
		t.Errorf("%s keys: missing %v, extra %v (real: GRAPH_MEMORY_USAGE_KEYS %v)", where, m, x, f.GraphPhaseKeys)
	}
}

// contractAuth: --api-key guards every route but the /health, /ready and
// /metrics prefixes, with 401 {"error":"Unauthorized"}.
func contractAuth(t *testing.T, f *contractFacts) {
	const key = "s3cret-key"
	c := newContractSim(t, Config{MaxTotalTokens: 20000, APIKey: key})
	rng := rand.New(rand.NewPCG(7, 8))
	want401 := f.Auth.ErrorBodies["401"]
	type route struct {
		method, path string
		body         func() any
	}
	guarded := []route{
		{http.MethodPost, "/generate", func() any { return contractGenBody(contractPrompt(rng, 8), 2, nil) }},
		{http.MethodGet, "/server_info", nil},
		{http.MethodGet, "/get_server_info", nil},
		{http.MethodGet, "/v1/loads", nil},
		{http.MethodPost, "/abort_request", func() any { return map[string]any{"rid": "nope"} }},
	}
	for _, r := range guarded {
		var body any
		for _, auth := range []string{"", "Bearer wrong", "Basic " + key, key} {
			if r.body != nil {
				body = r.body()
			}
			status, data := c.do(r.method, r.path, auth, body)
			var got map[string]string
			_ = json.Unmarshal(data, &got)
			if status != http.StatusUnauthorized || !reflect.DeepEqual(got, want401) {
				t.Errorf("%s %s with Authorization %q: %d %.200s, want 401 %v", r.method, r.path, auth, status, data, want401)
			}
		}
		okAuth := []string{"Bearer " + key}
		if f.Auth.BearerCaseInsensitive {
			okAuth = append(okAuth, "bearer "+key, "BEARER "+key)
		}
		for _, auth := range okAuth {
			if r.body != nil {
				body = r.body()
			}
			if status, data := c.do(r.method, r.path, auth, body); status != http.StatusOK {
				t.Errorf("%s %s with Authorization %q: %d %.200s, want 200", r.method, r.path, auth, status, data)
			}
		}
	}
	// always allowed: prefix match on /health, /ready, /metrics
	for _, p := range []string{"/health", "/health_generate", "/metrics"} {
		if !slices.ContainsFunc(f.Auth.AlwaysAllowedPrefixes, func(pre string) bool { return strings.HasPrefix(p, pre) }) {
			t.Errorf("%s is not exempt from the API key in %s (prefixes %v)", p, contractPin, f.Auth.AlwaysAllowedPrefixes)
			continue
		}
		if status, data := c.do(http.MethodGet, p, "", nil); status != http.StatusOK {
			t.Errorf("GET %s without a key: %d %.200s, want 200 (always allowed)", p, status, data)
		}
	}
	// no key configured: nothing is guarded
	open := newContractSim(t, Config{MaxTotalTokens: 20000})
	if status, data := open.do(http.MethodGet, "/server_info", "", nil); status != http.StatusOK {
		t.Errorf("GET /server_info on a server without --api-key: %d %.200s", status, data)
	}
}

// contractRoutedDPRank: GenerateReqInput.routed_dp_rank (and its deprecated
// alias data_parallel_rank) picks the rank; out of range is a 400.
func contractRoutedDPRank(t *testing.T, f *contractFacts) {
	rng := rand.New(rand.NewPCG(9, 10))
	t.Run("dp1", func(t *testing.T) {
		c := newContractSim(t, Config{MaxTotalTokens: 20000})
		for _, field := range []string{"routed_dp_rank", "data_parallel_rank"} {
			if !slices.Contains(f.GenerateReqInput.Fields, field) {
				t.Fatalf("GenerateReqInput has no %s", field)
			}
			status, data := c.do(http.MethodPost, "/generate", "", contractGenBody(contractPrompt(rng, 8), 2, map[string]any{field: 0}))
			if status != http.StatusOK {
				t.Errorf("%s=0 on one rank: %d %.200s, want 200 (%s: ignored)", field, status, data, f.GenerateReqInput.IgnoredWhen)
			}
		}
		status, data := c.do(http.MethodPost, "/generate", "", contractGenBody(contractPrompt(rng, 8), 2, map[string]any{"routed_dp_rank": 1}))
		want := strings.NewReplacer("{routed_dp_rank}", "1", "{num_dp_ranks}", "1").Replace(f.GenerateReqInput.OutOfRangeError)
		var body struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(data, &body)
		if status != http.StatusBadRequest || body.Error.Message != want {
			t.Errorf(`routed_dp_rank=1 on one rank: %d %.200s, want 400 {"error":{"message":%q}}`, status, data, want)
		}
	})
	t.Run("dp2", func(t *testing.T) {
		c := newContractSim(t, Config{MaxTotalTokens: 20000, DPSize: 2})
		c.pause(true)
		batch := c.submit([]map[string]any{
			contractGenBody(contractPrompt(rng, 8), 2, map[string]any{"routed_dp_rank": 1}),
			contractGenBody(contractPrompt(rng, 8), 2, map[string]any{"routed_dp_rank": 1}),
			contractGenBody(contractPrompt(rng, 8), 2, map[string]any{"data_parallel_rank": 1}),
		})
		var entries []map[string]any
		contractEventually(t, "3 requests queued on rank 1", func() (bool, string) {
			_, entries = c.loads("")
			if len(entries) != 2 {
				return false, fmt.Sprintf("%d entries", len(entries))
			}
			return entries[1]["num_waiting_reqs"] == float64(3), fmt.Sprintf("rank0 %v rank1 %v", entries[0]["num_waiting_reqs"], entries[1]["num_waiting_reqs"])
		})
		if entries[0]["num_waiting_reqs"] != float64(0) {
			t.Errorf("rank 0 has %v waiting; every request was routed to rank 1", entries[0]["num_waiting_reqs"])
		}
		c.pause(false)
		for _, r := range batch.wait(t) {
			if r.err != nil || r.status != http.StatusOK {
				t.Errorf("/generate routed to rank 1: %v %d %.200s", r.err, r.status, r.body)
			}
		}
		status, data := c.do(http.MethodPost, "/generate", "", contractGenBody(contractPrompt(rng, 8), 2, map[string]any{"routed_dp_rank": 2}))
		want := strings.NewReplacer("{routed_dp_rank}", "2", "{num_dp_ranks}", "2").Replace(f.GenerateReqInput.OutOfRangeError)
		if status != http.StatusBadRequest || !strings.Contains(string(data), want) {
			t.Errorf("routed_dp_rank=2 on two ranks: %d %.200s, want 400 %q", status, data, want)
		}
	})
}

// contractMetricSamples returns the sample lines of one metric family.
func contractMetricSamples(text, name string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			out = append(out, line)
		}
	}
	return out
}

// contractStopTrim: `text` leaves out the matched stop token as
// DetokenizerManager.trim_matched_stop does (even with
// skip_special_tokens=false, where the sim would write it as <|id|>), unless
// no_stop_trim (default False) keeps it; output_ids always end with it.
func contractStopTrim(t *testing.T, f *contractFacts) {
	if !f.StopTrim.DropsMatchedToken || !f.StopTrim.NoStopTrimKeeps || f.StopTrim.NoStopTrimDefault != "False" {
		t.Fatalf("extractor facts %+v: the simulator's stop trimming no longer matches SGLang", f.StopTrim)
	}
	c := newContractSim(t, Config{OutputLenDistribution: DistFixed, OutputLenMean: 6})
	for _, keep := range []bool{false, true} {
		for _, stream := range []bool{false, true} {
			sp := map[string]any{"max_new_tokens": 32, "skip_special_tokens": false}
			if keep {
				sp["no_stop_trim"] = true
			}
			status, data := c.do(http.MethodPost, "/generate", "", map[string]any{
				"input_ids": []int{5, 6, 7}, "rid": fmt.Sprintf("trim-%v-%v", keep, stream), "stream": stream, "sampling_params": sp})
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, data)
			}
			if stream { // the last chunk before [DONE]
				events := strings.Split(strings.TrimSpace(string(data)), "\n\n")
				data = []byte(strings.TrimPrefix(events[len(events)-2], "data: "))
			}
			var g GenerateResponse
			if err := json.Unmarshal(data, &g); err != nil {
				t.Fatal(err)
			}
			fr := g.MetaInfo.FinishReason
			if fr == nil || fr.Type != "stop" || fr.Matched == nil || len(g.OutputIDs) == 0 || int(g.OutputIDs[len(g.OutputIDs)-1]) != *fr.Matched {
				t.Fatalf("finish %+v, output_ids %v", fr, g.OutputIDs)
			}
			if has := strings.HasSuffix(g.Text, fmt.Sprintf("<|%d|>", *fr.Matched)); has != keep {
				t.Errorf("no_stop_trim=%v stream=%v: text %q", keep, stream, g.Text)
			}
		}
	}
}

// contractRetraction: the labelled counter has no sample until a retraction,
// and meta_info carries the per-request count under the real key.
func contractRetraction(t *testing.T, f *contractFacts) {
	c := newContractSim(t, Config{MaxTotalTokens: 1000, ScheduleConservativeness: 0.1, DisableRadixCache: true})
	metrics := func() string {
		status, data := c.do(http.MethodGet, "/metrics", "", nil)
		if status != http.StatusOK {
			t.Fatalf("GET /metrics: %d", status)
		}
		return string(data)
	}
	if s := contractMetricSamples(metrics(), f.Retraction.Counter); len(s) > 0 {
		t.Errorf("%s exported before any retraction: %q (a labelled %s has no sample until .labels().inc())",
			f.Retraction.Counter, s, f.Retraction.Kind)
	}
	perRequest := 0
	for _, meta := range contractRetract(t, c) {
		if m, _ := contractDiff(contractKeys(meta), f.Retraction.MetaInfoBaseKeys); len(m) > 0 {
			t.Errorf("meta_info lacks %v (always set by the tokenizer manager)", m)
		}
		if v, ok := meta[f.Retraction.MetaInfoKey]; ok {
			perRequest += contractInt(t, "meta_info."+f.Retraction.MetaInfoKey, v)
		}
	}
	if perRequest == 0 {
		t.Errorf("no meta_info.%s > 0 though the server retracted", f.Retraction.MetaInfoKey)
	}
	samples := contractMetricSamples(metrics(), f.Retraction.Counter)
	if len(samples) == 0 {
		t.Fatalf("%s not exported after %d retractions", f.Retraction.Counter, perRequest)
	}
	total := 0.0
	for _, s := range samples {
		if f.Retraction.Labelled && !strings.HasPrefix(s, f.Retraction.Counter+"{") {
			t.Errorf("sample %q has no labels; the real counter is labelled", s)
		}
		v, err := strconv.ParseFloat(s[strings.LastIndexByte(s, ' ')+1:], 64)
		if err != nil {
			t.Errorf("sample %q: %v", s, err)
		}
		total += v
	}
	if int(total) != perRequest {
		t.Errorf("%s = %v, but the requests' meta_info.%s add up to %d", f.Retraction.Counter, total, f.Retraction.MetaInfoKey, perRequest)
	}
}

// contractRetract drives a small pool into retractions (4 requests of 100
// prompt + 300 output tokens on 1000 KV slots, aggressive admission) and
// returns each request's meta_info.
func contractRetract(t *testing.T, c *contractSim) []map[string]any {
	t.Helper()
	rng := rand.New(rand.NewPCG(11, 12))
	c.pause(true)
	var bodies []map[string]any
	for i := 0; i < 4; i++ {
		bodies = append(bodies, contractGenBody(contractPrompt(rng, 100), 300, nil))
	}
	batch := c.submit(bodies)
	contractEventually(t, "4 queued requests", func() (bool, string) {
		st := c.s.Stats()
		return st.Waiting == 4, fmt.Sprintf("%+v", st)
	})
	c.pause(false)
	var metas []map[string]any
	for _, r := range batch.wait(t) {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("/generate: %v %d %.200s", r.err, r.status, r.body)
		}
		var g struct {
			MetaInfo map[string]any `json:"meta_info"`
		}
		if err := json.Unmarshal(r.body, &g); err != nil {
			t.Fatalf("/generate answer: %v", err)
		}
		metas = append(metas, g.MetaInfo)
	}
	if st := c.s.Stats(); st.RetractionsTotal == 0 {
		t.Fatalf("no retraction happened (%+v); the scenario needs one", st)
	}
	return metas
}

// contractLegacy: Config.Release defaults to the pin; set to the legacy
// release, the simulator serves that release's surface: no /v1/loads (the
// generate stage then falls back), no /server_info, no retraction counter or
// meta_info count, and its older API-key check.
func contractLegacy(t *testing.T, f *contractFacts) {
	lf := f.Legacy
	if got := newContractSim(t, Config{MaxTotalTokens: 20000}).s.Config().Release; got != f.SGLangVersion {
		t.Errorf("Config.Release defaults to %q, want %q", got, f.SGLangVersion)
	}
	c := newContractSim(t, Config{MaxTotalTokens: 1000, ScheduleConservativeness: 0.1, DisableRadixCache: true, Release: lf.Version})
	for path, has := range map[string]bool{"/v1/loads": lf.HasV1Loads, "/server_info": lf.HasServerInfo} {
		status, data := c.do(http.MethodGet, path, "", nil)
		if want := map[bool]int{true: http.StatusOK, false: http.StatusNotFound}[has]; status != want {
			t.Errorf("release %s: GET %s %d %.200s, want %d (route in %s: %v)", lf.Version, path, status, data, want, lf.Version, has)
		}
	}
	for _, p := range []string{"/generate", "/health", "/get_server_info", "/abort_request"} {
		if !slices.Contains(lf.Routes, p) {
			t.Errorf("release %s has no %s route", lf.Version, p)
		}
	}
	info := c.getJSON("/get_server_info")
	if v, _ := info["version"].(string); !strings.HasPrefix(v, lf.Version) {
		t.Errorf("release %s: /get_server_info version %q", lf.Version, info["version"])
	}
	metas := contractRetract(t, c)
	status, data := c.do(http.MethodGet, "/metrics", "", nil)
	if status != http.StatusOK {
		t.Fatalf("release %s: GET /metrics %d", lf.Version, status)
	}
	if s := contractMetricSamples(string(data), f.Retraction.Counter); !lf.HasRetractionCounter && len(s) > 0 {
		t.Errorf("release %s exports %q after retractions; it declares only %v", lf.Version, s, lf.MetricNames)
	}
	for _, meta := range metas {
		if _, ok := meta[f.Retraction.MetaInfoKey]; ok && !slices.Contains(lf.MetaInfoBaseKeys, f.Retraction.MetaInfoKey) {
			t.Errorf("release %s: meta_info has %s; its meta_info is %v", lf.Version, f.Retraction.MetaInfoKey, lf.MetaInfoBaseKeys)
			break
		}
	}

	const key = "legacy-key"
	k := newContractSim(t, Config{MaxTotalTokens: 20000, Release: lf.Version, APIKey: key})
	for _, p := range []string{"/health", "/metrics"} {
		if !slices.ContainsFunc(lf.AlwaysAllowedPrefixes, func(pre string) bool { return strings.HasPrefix(p, pre) }) {
			continue
		}
		if status, data := k.do(http.MethodGet, p, "", nil); status != http.StatusOK {
			t.Errorf("release %s with a key: GET %s without one: %d %.200s, want 200", lf.Version, p, status, data)
		}
	}
	if status, _ := k.do(http.MethodGet, "/get_server_info", "Bearer "+key, nil); status != http.StatusOK {
		t.Errorf("release %s: GET /get_server_info with the key: %d", lf.Version, status)
	}
	if status, data := k.do(http.MethodGet, "/get_server_info", "", nil); status != http.StatusUnauthorized {
		t.Errorf("release %s: GET /get_server_info without the key: %d %.200s, want 401", lf.Version, status, data)
	}
	if !lf.BearerCaseInsensitive {
		if status, _ := k.do(http.MethodGet, "/get_server_info", "bearer "+key, nil); status != http.StatusUnauthorized {
			t.Errorf(`release %s: "bearer <key>" got %d; this release compares the header with "Bearer " + api_key exactly (401)`, lf.Version, status)
		}
	}
}

// contractDuplicateRID: 0.5.23 refuses a call naming one rid twice
// (GenerateReqInput._validate_rid_uniqueness) and a rid already in flight
// (TokenizerManager._init_req_state), each a ValueError, HTTP 400 with the
// source's message; a finished rid may be used again. 0.5.4 checks neither.
func contractDuplicateRID(t *testing.T, f *contractFacts) {
	rng := rand.New(rand.NewPCG(11, 12))
	errorOf := func(data []byte) string {
		var body struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(data, &body)
		return body.Error.Message
	}
	c := newContractSim(t, Config{MaxTotalTokens: 20000})
	batch := map[string]any{
		"input_ids":       [][]int{contractPrompt(rng, 8), contractPrompt(rng, 8), contractPrompt(rng, 8)},
		"rid":             []string{"a", "b", "a"},
		"sampling_params": map[string]any{"max_new_tokens": 2},
	}
	want := strings.ReplaceAll(f.GenerateReqInput.DupInRequest, "{duplicates}", "['a']")
	if status, data := c.do(http.MethodPost, "/generate", "", batch); status != http.StatusBadRequest || errorOf(data) != want {
		t.Errorf("batch with rid 'a' twice: %d %.200s, want 400 %q", status, data, want)
	}
	c.pause(true)
	first := c.submit([]map[string]any{contractGenBody(contractPrompt(rng, 8), 2, map[string]any{"rid": "r1"})})
	contractEventually(t, "r1 queued", func() (bool, string) {
		st := c.s.Stats()
		return st.Waiting+st.Running == 1, fmt.Sprintf("%+v", st)
	})
	want = strings.ReplaceAll(f.GenerateReqInput.DupInFlight, "{rid}", "r1")
	if status, data := c.do(http.MethodPost, "/generate", "", contractGenBody(contractPrompt(rng, 8), 2, map[string]any{"rid": "r1"})); status != http.StatusBadRequest || errorOf(data) != want {
		t.Errorf("rid r1 while r1 is in flight: %d %.200s, want 400 %q", status, data, want)
	}
	c.pause(false)
	if res := first.wait(t); res[0].status != http.StatusOK {
		t.Fatalf("r1: %d %.200s", res[0].status, res[0].body)
	}
	if status, data := c.do(http.MethodPost, "/generate", "", contractGenBody(contractPrompt(rng, 8), 2, map[string]any{"rid": "r1"})); status != http.StatusOK {
		t.Errorf("rid r1 again once r1 was answered: %d %.200s, want 200", status, data)
	}

	if f.Legacy.ChecksDuplicateRIDs {
		t.Fatalf("sglang %s now checks duplicate rids: model it for Release054", f.Legacy.Version)
	}
	legacy := newContractSim(t, Config{MaxTotalTokens: 20000, Release: Release054})
	if status, data := legacy.do(http.MethodPost, "/generate", "", batch); status == http.StatusBadRequest && strings.Contains(string(data), "Duplicate") {
		t.Errorf("release %s refused a duplicate rid: %.200s", Release054, data)
	}
}
