package sim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Nominal figures of the simulated hardware, reported where SGLang reports
// memory (memory_usage, /v1/loads memory): a 30B-parameter bf16 model whose
// KV cache takes 48 layers x 4 KV heads x 128 dims x 2 (K, V) x 2 bytes per
// token, on one 141 GB accelerator per rank.
const (
	simWeightGB           = 56.87
	simKVBytesPerToken    = 98304
	simStartupAvailableGB = 131.5
	simDecodeGraphGB      = 0.412
	simAccelerator        = "Simulated Accelerator (draftflow sim)"
)

// graphPhases are GRAPH_MEMORY_USAGE_KEYS (model_executor/graph_memory_usage.py),
// the phases of memory_usage.graph and startup_time.cuda_graph.
var graphPhases = []string{"prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend"}

// unit draws a number in [0, 1) from the server seed and a label: the
// simulated durations are reproducible per seed and change with the label.
func unit(seed int64, label string) float64 {
	h := fnv.New64a()
	h.Write([]byte(strconv.FormatInt(seed, 10)))
	h.Write([]byte{0})
	h.Write([]byte(label))
	return float64(h.Sum64()>>11) / (1 << 53)
}

// schedulerStartupTime is one rank's build_scheduler_startup_time
// (observability/startup_time.py) for the server's gen-th start (gen counts
// restarts after crashes): load_weight, kv_cache_allocation, scheduler_e2e,
// cuda_graph by phase, in seconds.
func schedulerStartupTime(seed, gen int64, rank int) map[string]any {
	u := func(what string) float64 { return unit(seed, fmt.Sprintf("startup/%d/%d/%s", gen, rank, what)) }
	load := 20 + 40*u("load_weight")
	kv := 0.5 + 2.5*u("kv_cache_allocation")
	graph := map[string]any{}
	for _, p := range graphPhases {
		graph[p] = 0.0
	}
	decode := 5 + 20*u("cuda_graph_decode")
	graph["decode"] = decode
	return map[string]any{
		"load_weight":         load,
		"kv_cache_allocation": kv,
		"scheduler_e2e":       load + kv + decode + 2 + 5*u("scheduler_e2e"),
		"cuda_graph":          graph,
	}
}

// engineStartupTime is build_engine_startup_time over the ranks: the
// critical path (maximum) of each duration, plus tokenizer_e2e.
func engineStartupTime(seed, gen int64, ranks int) map[string]any {
	agg := map[string]any{"load_weight": 0.0, "kv_cache_allocation": 0.0, "scheduler_e2e": 0.0}
	graph := map[string]any{}
	for _, p := range graphPhases {
		graph[p] = 0.0
	}
	for r := 0; r < ranks; r++ {
		st := schedulerStartupTime(seed, gen, r)
		for _, k := range []string{"load_weight", "kv_cache_allocation", "scheduler_e2e"} {
			agg[k] = math.Max(agg[k].(float64), st[k].(float64))
		}
		for p, v := range st["cuda_graph"].(map[string]any) {
			graph[p] = math.Max(graph[p].(float64), v.(float64))
		}
	}
	agg["cuda_graph"] = graph
	agg["tokenizer_e2e"] = agg["scheduler_e2e"].(float64) + 1 + 3*unit(seed, fmt.Sprintf("startup/%d/tokenizer", gen))
	return agg
}

// given returns v when the caller set it (non-zero), else nil: server args
// SGLang leaves None unless they are on the command line.
func given[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// serverArgs is the part of SGLang's server args the simulator models, as
// /server_info reports them (ServerArgs.resolved_dict: resolved values; args
// no resolution hook sets, such as max_running_requests, context_length,
// max_total_tokens, max_queued_requests and api_key, stay null unless given).
func (s *Server) serverArgs() map[string]any {
	c, g := s.cfg, s.given
	args := map[string]any{
		"model_path":                c.ModelPath,
		"tokenizer_path":            c.ModelPath,
		"served_model_name":         c.ModelPath,
		"context_length":            given(g.ContextLength),
		"max_total_tokens":          given(g.MaxTotalTokens),
		"max_running_requests":      given(g.MaxRunningRequests),
		"max_queued_requests":       given(g.MaxQueuedRequests),
		"chunked_prefill_size":      c.ChunkedPrefillSize,
		"max_prefill_tokens":        c.MaxPrefillTokens,
		"schedule_policy":           "fcfs",
		"schedule_conservativeness": c.ScheduleConservativeness,
		"page_size":                 1,
		"disable_radix_cache":       c.DisableRadixCache,
		"decode_log_interval":       c.DecodeLogInterval,
		"stream_interval":           c.StreamInterval,
		"random_seed":               c.Seed,
		"enable_metrics":            true,
		"tp_size":                   1,
		"pp_size":                   1,
		"dp_size":                   c.DPSize,
		"load_balance_method":       "round_robin",
		"enable_dp_attention":       false,
		"disaggregation_mode":       "null",
		"api_key":                   given(g.APIKey),
		"weight_version":            "default",
		"skip_tokenizer_init":       false,
	}
	if c.Release != Release054 {
		args["attn_dp_size"] = 1
	}
	return args
}

// launchCommand is a launch_command reproducing the given settings.
func (s *Server) launchCommand() string {
	c, g := s.cfg, s.given
	parts := []string{"python -m sglang.launch_server", "--model-path", c.ModelPath}
	add := func(flag string, v int) {
		if v != 0 {
			parts = append(parts, flag, strconv.Itoa(v))
		}
	}
	add("--max-total-tokens", g.MaxTotalTokens)
	add("--max-running-requests", g.MaxRunningRequests)
	add("--context-length", g.ContextLength)
	add("--max-queued-requests", g.MaxQueuedRequests)
	if c.DPSize > 1 {
		add("--dp-size", c.DPSize)
	}
	if g.APIKey != "" {
		parts = append(parts, "--api-key", "<redacted>")
	}
	return strings.Join(parts, " ")
}

// cudaGraphBS is the decode batch sizes a CUDA graph is captured for.
func cudaGraphBS(maxRunning int) []int {
	var out []int
	for _, bs := range []int{1, 2, 4, 8} {
		if bs <= maxRunning {
			out = append(out, bs)
		}
	}
	for bs := 16; bs <= min(maxRunning, 256); bs += 8 {
		out = append(out, bs)
	}
	return out
}

// graphUsage is memory_usage.graph: GB by CUDA graph phase.
func graphUsage() map[string]any {
	g := map[string]any{}
	for _, p := range graphPhases {
		g[p] = 0.0
	}
	g["decode"] = simDecodeGraphGB
	return g
}

// kvCacheGB is the KV pool's size in GB (round 3, as build_memory_usage).
func (s *Server) kvCacheGB() float64 {
	return round(float64(s.cfg.MaxTotalTokens)*simKVBytesPerToken/(1<<30), 3)
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// internalStateLocked is one rank's internal_states entry.
// 0.5.23: SchedulerInternalStateController.get_internal_state (the resolved
// server args plus world_size, startup_time,
// effective_max_running_requests_per_dp, last_gen_throughput, memory_usage
// from build_memory_usage, and the disaggregation keys). 0.5.4:
// Scheduler.get_internal_state (server args, last_gen_throughput,
// memory_usage {weight, kvcache, token_capacity, graph}). s.mu held.
func (s *Server) internalStateLocked(e *engine) map[string]any {
	st := s.serverArgs()
	st["last_gen_throughput"] = e.genThroughput
	if s.cfg.Release == Release054 {
		st["memory_usage"] = map[string]any{
			"weight":         round(simWeightGB, 2),
			"kvcache":        round(s.kvCacheGB(), 2),
			"token_capacity": s.cfg.MaxTotalTokens,
			"graph":          round(simDecodeGraphGB, 2),
		}
		return st
	}
	st["world_size"] = s.cfg.DPSize // compute_world_size(dp, tp=1, pp=1)
	st["startup_time"] = schedulerStartupTime(s.cfg.Seed, s.crashes, e.rank)
	st["effective_max_running_requests_per_dp"] = s.cfg.MaxRunningRequests
	st["memory_usage"] = map[string]any{
		"weight":             simWeightGB,
		"kvcache":            s.kvCacheGB(),
		"startup_available":  simStartupAvailableGB,
		"token_capacity":     s.cfg.MaxTotalTokens,
		"token_capacity_swa": nil,
		"graph":              graphUsage(),
	}
	st["disaggregation_mode"] = "null"
	st["decode_cuda_graph_bs"] = cudaGraphBS(s.cfg.MaxRunningRequests)
	st["decode_cuda_graph_memory_gb"] = simDecodeGraphGB
	return st
}

// handleServerInfo serves /server_info and /get_server_info.
//
// 0.5.23 (entrypoints/http_server.py server_info, utils/common.py
// build_server_info): the resolved server args, launch_command, the
// scheduler's init info (status, max_total_num_tokens per rank,
// max_req_input_len, hicache_object_layout; with DP the controller's, plus
// scheduler_pids), kv_events, startup_time (the engine's, replaced on every
// restart), internal_states (one per DP rank), version and frontend.
//
// 0.5.4 (/get_server_info only): the server args, the scheduler's init info
// (status, max_total_num_tokens, max_req_input_len), internal_states and
// version.
//
// Sim-only figures are under "simulator".
func (s *Server) handleServerInfo(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	states := make([]any, len(s.ranks))
	ranks := make([]any, len(s.ranks))
	for i, e := range s.ranks {
		states[i] = s.internalStateLocked(e)
		ranks[i] = map[string]any{
			"dp_rank":         e.rank,
			"used_tokens":     e.usedTokens(),
			"cached_tokens":   e.tree.size,
			"new_token_ratio": e.ratio,
			"sim_time":        e.now,
		}
	}
	maxReqInput := s.ranks[0].maxReqInputLen
	crashes := s.crashes
	s.mu.Unlock()

	c := s.cfg
	info := s.serverArgs()
	info["status"] = "ready"
	info["max_total_num_tokens"] = c.MaxTotalTokens
	info["max_req_input_len"] = maxReqInput
	info["internal_states"] = states
	info["version"] = c.Release
	if c.Release != Release054 {
		info["launch_command"] = s.launchCommand()
		info["hicache_object_layout"] = map[string]any{
			"enabled": false, "backend": nil, "page_size": 1,
			"hicache_object_layout": map[string]any{"pools": []any{}},
			"reason":                "Hierarchical cache is disabled",
		}
		if c.DPSize > 1 {
			pids := make([]int, c.DPSize)
			for i := range pids {
				pids[i] = 1000 + i
			}
			info["scheduler_pids"] = pids
		}
		info["kv_events"] = nil
		info["startup_time"] = engineStartupTime(c.Seed, crashes, c.DPSize)
		info["frontend"] = "python"
	}
	info["simulator"] = map[string]any{
		"release":    c.Release,
		"time_scale": c.TimeScale,
		"instant":    c.Instant,
		"manual":     s.manual,
		"vocab_size": c.VocabSize,
		"eos_ids":    c.EOSTokenIDs,
		"restarts":   crashes,
		"ranks":      ranks,
	}
	writeJSON(w, http.StatusOK, info)
}

// validLoadSections is LoadSnapshot.VALID_SECTIONS (managers/load_snapshot.py).
var validLoadSections = []string{"all", "core", "disagg", "lora", "memory", "queues", "spec"}

// loadSnapshotLocked is one rank's LoadSnapshot.to_dict(include) as
// SchedulerLoadInquirer.get_loads builds it
// (managers/scheduler_components/load_inquirer.py), outside PD
// disaggregation, without speculative decoding or LoRA. include nil means
// every section. s.mu held.
func (s *Server) loadSnapshotLocked(e *engine, include map[string]bool) map[string]any {
	used := e.usedTokens()
	pending, uncached := 0, 0
	miss := 1 - e.recentCacheHitRate()
	for _, r := range e.waiting {
		// req.seqlen: prompt plus output so far (a retracted request keeps it)
		pending += r.fillLen()
		// the waiting queue is not prefix-matched under FCFS: the recent hit
		// rate estimates what is cached
		uncached += int(float64(r.fillLen()) * miss)
	}
	if c := e.chunked; c != nil {
		uncached += max(0, c.fillLen()-c.kvLen)
	}
	total := used + pending // num_used_tokens + sum(seqlen of the waiting queue)
	var moments any
	if e.decodeMoments[0] > 0 {
		moments = slices.Clone(e.decodeMoments[:])
	}
	load := map[string]any{
		"timestamp":                     unixNow(),
		"dp_rank":                       e.rank,
		"num_running_reqs":              len(e.running),
		"num_waiting_reqs":              len(e.waiting),
		"num_waiting_uncached_tokens":   uncached,
		"num_used_tokens":               used,
		"num_total_tokens":              total,
		"num_active_tokens":             total, // no KV awaiting a transfer outside PD decode
		"num_prealloc_ready_tokens":     0,
		"max_total_num_tokens":          s.cfg.MaxTotalTokens,
		"max_running_requests":          s.cfg.MaxRunningRequests,
		"token_usage":                   round(float64(used)/float64(s.cfg.MaxTotalTokens), 4),
		"gen_throughput":                round(e.genThroughput, 2),
		"cache_hit_rate":                round(e.lastPrefillHitRate, 4),
		"utilization":                   0.0, // max_running_requests_under_SLO is never set in 0.5.23: stays 0
		"total_prefill_uncached_tokens": e.totalPrefillUncached,
		"total_prefill_busy_us":         e.totalPrefillBusyUS,
		"decode_moments":                moments,
	}
	want := func(name string) bool { return include == nil || include["all"] || include[name] }
	if want("memory") {
		load["memory"] = map[string]any{
			"weight_gb":      round(simWeightGB, 3),
			"kv_cache_gb":    s.kvCacheGB(),
			"graph_gb":       round(simDecodeGraphGB, 3),
			"token_capacity": s.cfg.MaxTotalTokens,
		}
	}
	if want("disagg") {
		load["disaggregation"] = map[string]any{
			"mode":                         "null",
			"prefill_bootstrap_queue_reqs": 0,
			"prefill_inflight_queue_reqs":  0,
			"decode_prealloc_queue_reqs":   0,
			"decode_transfer_queue_reqs":   0,
			"decode_retracted_queue_reqs":  0,
			"kv_transfer_speed_gb_s":       0.0,
			"kv_transfer_latency_ms":       0.0,
		}
	}
	if want("queues") {
		load["queues"] = map[string]any{
			"waiting":        len(e.waiting),
			"grammar":        0,
			"paused":         0,
			"retracted":      e.retractedLogged,
			"prealloc_ready": 0,
		}
	}
	return load
}

// handleLoads serves GET /v1/loads (entrypoints/v1_loads.py get_loads):
// {"timestamp", "version", "accelerator", "num_accelerators", "loads"} with
// one LoadSnapshot per DP rank. ?dp_rank=N keeps rank N (none when out of
// range); ?include=a,b selects sections (core, memory, spec, lora, disagg,
// queues, all). An unknown section makes LoadSnapshot.to_dict raise
// ValueError outside the handler's try, so the real server answers 500
// "Internal Server Error" (when there is a load to render), as here.
// ?format=prometheus renders the loads as gauges.
func (s *Server) handleLoads(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rank := -1
	if vs, ok := q["dp_rank"]; ok {
		v, err := strconv.Atoi(strings.TrimSpace(vs[len(vs)-1]))
		if err != nil {
			s.writeRequestValidationError(w, "query", "dp_rank", vs[len(vs)-1])
			return
		}
		rank = v
		if rank < 0 || rank >= s.cfg.DPSize {
			rank = -2 // filters everything out
		}
	}
	var include map[string]bool
	var bad []string
	if inc := q.Get("include"); inc != "" {
		include = map[string]bool{}
		for _, p := range strings.Split(inc, ",") {
			p = strings.TrimSpace(p)
			include[p] = true
			if !slices.Contains(validLoadSections, p) {
				bad = append(bad, p)
			}
		}
		if include["core"] && len(include) == 1 {
			include = map[string]bool{"core": true}
		}
	}
	s.mu.Lock()
	var loads []map[string]any
	for _, e := range s.ranks {
		if rank == -2 || (rank >= 0 && e.rank != rank) {
			continue
		}
		loads = append(loads, s.loadSnapshotLocked(e, include))
	}
	s.mu.Unlock()
	if len(bad) > 0 && len(loads) > 0 {
		writeInternalError(w)
		return
	}
	if q.Get("format") == "prometheus" {
		writeLoadsPrometheus(w, loads)
		return
	}
	if loads == nil {
		loads = []map[string]any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"timestamp":        time.Now().UTC().Format("2006-01-02T15:04:05.000000+00:00"),
		"version":          s.cfg.Release,
		"accelerator":      simAccelerator,
		"num_accelerators": 1, // tp_size * pp_size per DP rank
		"loads":            loads,
	})
}

// writeLoadsPrometheus is _format_loads_prometheus: every numeric field (and
// numeric field of a section, prefixed spec_/disagg_/memory_/queues_) as a
// gauge labelled dp_rank.
func writeLoadsPrometheus(w http.ResponseWriter, loads []map[string]any) {
	prefixes := map[string]string{"speculative": "spec", "disaggregation": "disagg"}
	type sample struct {
		rank any
		v    any
	}
	samples := map[string][]sample{}
	var order []string
	add := func(name string, rank, v any) {
		if _, ok := samples[name]; !ok {
			order = append(order, name)
		}
		samples[name] = append(samples[name], sample{rank, v})
	}
	isNum := func(v any) bool {
		switch v.(type) {
		case int, int64, float64:
			return true
		}
		return false
	}
	for _, l := range loads {
		keys := make([]string, 0, len(l))
		for k := range l {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "dp_rank" {
				continue
			}
			switch v := l[k].(type) {
			case map[string]any:
				p := k
				if x, ok := prefixes[k]; ok {
					p = x
				}
				sub := make([]string, 0, len(v))
				for sk := range v {
					sub = append(sub, sk)
				}
				sort.Strings(sub)
				for _, sk := range sub {
					if isNum(v[sk]) {
						add("sglang_"+p+"_"+sk, l["dp_rank"], v[sk])
					}
				}
			default:
				if isNum(v) {
					add("sglang_"+k, l["dp_rank"], v)
				}
			}
		}
	}
	var b strings.Builder
	for _, name := range order {
		fmt.Fprintf(&b, "# TYPE %s gauge\n", name)
		for _, s := range samples[name] {
			fmt.Fprintf(&b, "%s{dp_rank=\"%v\"} %v\n", name, s.rank, s.v)
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(b.String()))
}

// writeRequestValidationError answers a query or body field FastAPI could
// not parse: SGLang turns RequestValidationError into HTTP 400 with the
// legacy ErrorResponse shape (http_server.py validation_exception_handler).
func (s *Server) writeRequestValidationError(w http.ResponseWriter, loc, field, input string) {
	detail := map[string]any{
		"type": "int_parsing", "loc": []string{loc, field},
		"msg":   "Input should be a valid integer, unable to parse string as an integer",
		"input": input,
	}
	b, _ := json.Marshal([]any{detail})
	writeJSON(w, http.StatusBadRequest, ErrorResponse{
		Object:  "error",
		Message: "1 validation error: " + string(b),
		Type:    "Bad Request",
		Code:    http.StatusBadRequest,
	})
}
