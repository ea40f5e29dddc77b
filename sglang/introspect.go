package sglang

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// This file reads what an SGLang server says about itself: /server_info (the KV pools, the running-request
// limits, the startup identity), /v1/loads (live load per data-parallel rank) and /metrics (the retraction
// counter). The shapes are those of the sglang 0.5.23 release (entrypoints/http_server.py server_info,
// managers/load_snapshot.py LoadSnapshot, observability/metrics_collector.py), which the simulator's
// contract test pins; older 0.5.x releases answer /get_server_info only and have no /v1/loads.
//
// Every field the client relies on is checked: a missing required field or a value of the wrong type is an
// *InvalidResponseError naming the endpoint and the field, never a silent zero. Fields the real server
// reports as null unless set on its command line (max_running_requests, context_length) read as "unknown",
// and the per-rank figures of internal_states take their place.

// RankCapacity is one data-parallel rank's limits: SGLang runs one scheduler, with its own KV pool and
// running batch, per rank.
type RankCapacity struct {
	// MaxTotalTokens is the rank's KV pool (memory_usage.token_capacity, max_total_num_tokens).
	MaxTotalTokens int
	// MaxRunningRequests is the rank's running-batch limit (effective_max_running_requests_per_dp); 0 when
	// the server does not say.
	MaxRunningRequests int
}

// Capacity is what /server_info says about a server's KV pools and limits.
type Capacity struct {
	// MaxTotalTokens is the KV pool size summed over the server's data-parallel ranks.
	MaxTotalTokens int
	// MaxRunningRequests bounds the server's running batches, summed over ranks; 0 when unknown.
	MaxRunningRequests int
	// ContextLength is the model's context length; 0 when the server reports none (null unless set with
	// --context-length: the model's own length applies and the server enforces it).
	ContextLength int
	// ServedModel is the model path the server reports.
	ServedModel string
	// Ranks has one entry per data-parallel rank (one without data parallelism).
	Ranks []RankCapacity
	// StartupTime is the server's startup_time, compacted JSON: the durations of its start, which differ on
	// every start, so a change means the server restarted. Empty when the server reports none.
	StartupTime string
	// Version is the SGLang version the server reports, if any.
	Version string
}

// ServerInfo reads the server's capacity from /server_info, falling back to /get_server_info (the only
// name in older releases; deprecated in 0.5.23, which logs a warning on every call).
func (c *Client) ServerInfo(ctx context.Context) (Capacity, error) {
	path := "/server_info"
	data, err := c.do(ctx, http.MethodGet, path, nil)
	if IsNotFound(err) {
		path = "/get_server_info"
		data, err = c.do(ctx, http.MethodGet, path, nil)
	}
	if err != nil {
		return Capacity{}, err
	}
	capa, err := parseServerInfo(data)
	if err != nil {
		return capa, c.invalid(path, err)
	}
	return capa, nil
}

// fieldError is a field of an introspection answer that is missing or has the wrong type.
type fieldError struct{ field, problem string }

func (e *fieldError) Error() string { return e.field + ": " + e.problem }

// invalid wraps a parse error of one of the server's answers into an *InvalidResponseError naming the
// endpoint and route.
func (c *Client) invalid(path string, err error) error {
	var ir *InvalidResponseError
	if errors.As(err, &ir) {
		return err
	}
	return &InvalidResponseError{Reason: fmt.Sprintf("%s%s: %v", c.base, path, err)}
}

// object is a decoded JSON object whose fields are read with checks.
type object struct {
	path   string // the object's place in the answer, for errors ("internal_states[1]")
	fields map[string]json.RawMessage
}

func decodeObject(path string, raw json.RawMessage) (object, error) {
	o := object{path: path}
	if err := json.Unmarshal(raw, &o.fields); err != nil || o.fields == nil {
		where := path
		if where == "" {
			where = "answer"
		}
		return o, &fieldError{where, "not a JSON object"}
	}
	return o, nil
}

func (o object) name(field string) string {
	if o.path == "" {
		return field
	}
	return o.path + "." + field
}

// raw returns a field, with ok false when it is absent or null.
func (o object) raw(field string) (json.RawMessage, bool) {
	r, ok := o.fields[field]
	if !ok || string(bytes.TrimSpace(r)) == "null" {
		return nil, false
	}
	return r, true
}

// number reads a numeric field; ok is false when it is absent or null.
func (o object) number(field string) (v float64, ok bool, err error) {
	r, ok := o.raw(field)
	if !ok {
		return 0, false, nil
	}
	if err := json.Unmarshal(r, &v); err != nil {
		return 0, false, &fieldError{o.name(field), fmt.Sprintf("%s is not a number", short(r))}
	}
	return v, true, nil
}

// integer reads a non-negative integer field; ok is false when it is absent or null.
func (o object) integer(field string) (v int, ok bool, err error) {
	f, ok, err := o.number(field)
	if err != nil || !ok {
		return 0, ok, err
	}
	if f < 0 || f != math.Trunc(f) || f > math.MaxInt32*float64(1<<20) {
		return 0, false, &fieldError{o.name(field), fmt.Sprintf("%v is not a non-negative integer", f)}
	}
	return int(f), true, nil
}

// required reads an integer field that must be present.
func (o object) required(field string) (int, error) {
	v, ok, err := o.integer(field)
	if err == nil && !ok {
		err = &fieldError{o.name(field), "missing"}
	}
	return v, err
}

func (o object) str(field string) (string, error) {
	r, ok := o.raw(field)
	if !ok {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		return "", &fieldError{o.name(field), fmt.Sprintf("%s is not a string", short(r))}
	}
	return s, nil
}

// child reads an object field; ok is false when it is absent or null.
func (o object) child(field string) (object, bool, error) {
	r, ok := o.raw(field)
	if !ok {
		return object{}, false, nil
	}
	c, err := decodeObject(o.name(field), r)
	return c, err == nil, err
}

// list reads an array-of-objects field; ok is false when it is absent or null.
func (o object) list(field string) ([]object, bool, error) {
	r, ok := o.raw(field)
	if !ok {
		return nil, false, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(r, &items); err != nil {
		return nil, false, &fieldError{o.name(field), fmt.Sprintf("%s is not a list", short(r))}
	}
	out := make([]object, len(items))
	for i, it := range items {
		c, err := decodeObject(o.name(field)+"["+strconv.Itoa(i)+"]", it)
		if err != nil {
			return nil, false, err
		}
		out[i] = c
	}
	return out, true, nil
}

func short(r json.RawMessage) string {
	s := string(r)
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// parseServerInfo reads a /server_info (or /get_server_info) answer. Per-rank figures come from
// internal_states (one entry per DP rank: memory_usage.token_capacity, effective_max_running_requests_per_dp);
// without them, the top level's max_total_num_tokens (the scheduler's pool, per rank) and
// max_running_requests (a server argument, null unless set) stand for every one of dp_size ranks.
func parseServerInfo(data []byte) (Capacity, error) {
	top, err := decodeObject("", data)
	if err != nil {
		return Capacity{}, err
	}
	var c Capacity
	if c.ServedModel, err = top.str("model_path"); err != nil {
		return c, err
	}
	if c.Version, err = top.str("version"); err != nil {
		return c, err
	}
	if c.ContextLength, _, err = top.integer("context_length"); err != nil {
		return c, err
	}
	if r, ok := top.raw("startup_time"); ok {
		var buf bytes.Buffer
		if err := json.Compact(&buf, r); err != nil {
			return c, &fieldError{"startup_time", "not JSON"}
		}
		c.StartupTime = buf.String()
	}
	dp, _, err := top.integer("dp_size")
	if err != nil {
		return c, err
	}
	topPool, havePool, err := top.integer("max_total_num_tokens")
	if err != nil {
		return c, err
	}
	if !havePool { // a server argument (--max-total-tokens), null unless set
		if topPool, havePool, err = top.integer("max_total_tokens"); err != nil {
			return c, err
		}
	}
	topRunning, _, err := top.integer("max_running_requests")
	if err != nil {
		return c, err
	}
	states, _, err := top.list("internal_states")
	if err != nil {
		return c, err
	}
	for _, s := range states {
		var r RankCapacity
		if mem, ok, err := s.child("memory_usage"); err != nil {
			return c, err
		} else if ok {
			if r.MaxTotalTokens, _, err = mem.integer("token_capacity"); err != nil {
				return c, err
			}
		}
		if r.MaxTotalTokens == 0 {
			if r.MaxTotalTokens, _, err = s.integer("max_total_num_tokens"); err != nil {
				return c, err
			}
		}
		if r.MaxRunningRequests, _, err = s.integer("effective_max_running_requests_per_dp"); err != nil {
			return c, err
		}
		c.Ranks = append(c.Ranks, r)
	}
	ranks := max(dp, 1)
	if len(c.Ranks) > 1 || (len(c.Ranks) == 1 && ranks == 1) {
		ranks = len(c.Ranks)
	}
	// Fill what internal_states left out (older releases have one state for several ranks, or none).
	for len(c.Ranks) < ranks {
		c.Ranks = append(c.Ranks, RankCapacity{})
	}
	for i := range c.Ranks {
		r := &c.Ranks[i]
		if r.MaxTotalTokens == 0 {
			if i > 0 && c.Ranks[0].MaxTotalTokens > 0 {
				r.MaxTotalTokens = c.Ranks[0].MaxTotalTokens
			} else {
				r.MaxTotalTokens = topPool
			}
		}
		if r.MaxRunningRequests == 0 {
			switch {
			case i > 0 && c.Ranks[0].MaxRunningRequests > 0:
				r.MaxRunningRequests = c.Ranks[0].MaxRunningRequests
			case topRunning > 0:
				// The server argument (--max-running-requests) bounds each replica of plain data parallelism
				// (0.5.23 divides it only over attention-DP ranks, which report internal_states).
				r.MaxRunningRequests = topRunning
			}
		}
		if r.MaxTotalTokens <= 0 {
			if !havePool && len(states) == 0 {
				return c, &fieldError{"max_total_num_tokens", "missing (and no internal_states[].memory_usage.token_capacity)"}
			}
			return c, &fieldError{fmt.Sprintf("internal_states[%d].memory_usage.token_capacity", i), "missing or zero"}
		}
		c.MaxTotalTokens += r.MaxTotalTokens
		c.MaxRunningRequests += r.MaxRunningRequests
	}
	for _, r := range c.Ranks {
		if r.MaxRunningRequests == 0 {
			c.MaxRunningRequests = 0 // unknown for some rank: unknown
		}
	}
	return c, nil
}

// Load is one poll of /v1/loads. The top-level figures are summed over the server's data-parallel ranks
// (TokenUsage is the worst rank's); Ranks has each rank's own.
type Load struct {
	// Rank is the rank's dp_rank (per-rank entries only).
	Rank int
	// Running is num_running_reqs: requests in the running batch.
	Running int
	// Waiting is num_waiting_reqs: requests in the server's queue.
	Waiting int
	// UsedTokens is num_used_tokens: KV tokens held by requests.
	UsedTokens int
	// MaxTokens is the KV pool (max_total_num_tokens, else memory.token_capacity). It is never
	// num_total_tokens, which adds the tokens of waiting requests to the used ones and exceeds the pool
	// whenever the server's queue backs up.
	MaxTokens int
	// MaxRunningRequests is the running-batch limit the rank reports; 0 when unknown.
	MaxRunningRequests int
	// TokenUsage is the KV usage in [0,1] (the worst rank's, where there are several).
	TokenUsage float64
	// GenThroughput is the server's recent output tokens per second.
	GenThroughput float64
	// Ranks holds one entry per rank, in dp_rank order (top-level Load only).
	Ranks []Load
}

// Loads polls /v1/loads (core and memory sections only).
func (c *Client) Loads(ctx context.Context) (Load, error) {
	const path = "/v1/loads"
	data, err := c.do(ctx, http.MethodGet, path+"?include=core,memory", nil)
	if err != nil {
		return Load{}, err
	}
	l, err := parseLoads(data)
	if err != nil {
		return l, c.invalid(path, err)
	}
	return l, nil
}

func parseLoads(data []byte) (Load, error) {
	top, err := decodeObject("", data)
	if err != nil {
		return Load{}, err
	}
	entries, ok, err := top.list("loads")
	if err != nil {
		return Load{}, err
	}
	if !ok || len(entries) == 0 {
		return Load{}, &fieldError{"loads", "missing or empty"}
	}
	var l Load
	for i, e := range entries {
		var r Load
		var ok bool
		if r.Rank, ok, err = e.integer("dp_rank"); err != nil {
			return l, err
		} else if !ok {
			r.Rank = i
		}
		for _, f := range []struct {
			name string
			dst  *int
		}{{"num_running_reqs", &r.Running}, {"num_waiting_reqs", &r.Waiting}, {"num_used_tokens", &r.UsedTokens}} {
			if *f.dst, err = e.required(f.name); err != nil {
				return l, err
			}
		}
		if r.MaxTokens, _, err = e.integer("max_total_num_tokens"); err != nil {
			return l, err
		}
		if r.MaxTokens == 0 {
			mem, ok, err := e.child("memory")
			if err != nil {
				return l, err
			}
			if ok {
				if r.MaxTokens, _, err = mem.integer("token_capacity"); err != nil {
					return l, err
				}
			}
		}
		if r.MaxTokens == 0 {
			return l, &fieldError{e.name("max_total_num_tokens"), "missing (and no memory.token_capacity)"}
		}
		if r.MaxRunningRequests, _, err = e.integer("max_running_requests"); err != nil {
			return l, err
		}
		if r.TokenUsage, ok, err = e.number("token_usage"); err != nil {
			return l, err
		} else if !ok {
			return l, &fieldError{e.name("token_usage"), "missing"}
		}
		if r.GenThroughput, _, err = e.number("gen_throughput"); err != nil {
			return l, err
		}
		l.Running += r.Running
		l.Waiting += r.Waiting
		l.UsedTokens += r.UsedTokens
		l.MaxTokens += r.MaxTokens
		l.MaxRunningRequests += r.MaxRunningRequests
		l.TokenUsage = max(l.TokenUsage, r.TokenUsage)
		l.GenThroughput += r.GenThroughput
		l.Ranks = append(l.Ranks, r)
	}
	for _, r := range l.Ranks {
		if r.MaxRunningRequests == 0 {
			l.MaxRunningRequests = 0
		}
	}
	return l, nil
}

// ForRank returns the load of DP rank r (r < 0: l itself, the whole server), or l itself when it is the
// only rank; false when the poll has no such rank.
func (l Load) ForRank(r int) (Load, bool) {
	if r < 0 {
		return l, true
	}
	for _, x := range l.Ranks {
		if x.Rank == r {
			return x, true
		}
	}
	if r == 0 && len(l.Ranks) <= 1 {
		return l, true
	}
	return Load{}, false
}

// Names of the /metrics series the client reads (SGLang 0.5.23, observability/metrics_collector.py; exported
// only by a server started with --enable-metrics).
const (
	// MetricPrefix starts the name of every SGLang series: a /metrics answer with none is a server without
	// --enable-metrics.
	MetricPrefix = "sglang:"
	// MetricRetractedTotal is the cumulative retraction counter, labelled (dp_rank among others): it has no
	// sample until the first retraction.
	MetricRetractedTotal = "sglang:num_retracted_requests_total"
	// MetricRetractedRecent is the gauge of retractions in the scheduler's last logging interval, the only
	// retraction series of releases before the counter (0.5.4).
	MetricRetractedRecent = "sglang:num_retracted_reqs"
)

// Retracted is the server's cumulative retraction counter, sglang:num_retracted_requests_total.
type Retracted struct {
	// Supported is true when the server exports SGLang's metrics (--enable-metrics). The counter is a
	// labelled counter: it has no sample until the first retraction, so a server that exports metrics but
	// not this series has retracted nothing yet.
	Supported bool
	// Total is the counter summed over its series.
	Total float64
	// PerRank is the counter per dp_rank label, when the series carry one.
	PerRank map[int]float64
	// Recent is the gauge sglang:num_retracted_reqs (retractions in the scheduler's last logging interval),
	// summed over ranks. Releases before the counter (0.5.4) have only this gauge.
	Recent float64
	// HasCounter is true when the counter has samples.
	HasCounter bool
}

// ForRank returns the counter of DP rank r (the total when the series have no rank or r < 0).
func (x Retracted) ForRank(r int) float64 {
	if r < 0 || len(x.PerRank) == 0 {
		return x.Total
	}
	return x.PerRank[r]
}

// RetractedTotal reads the server's cumulative retraction counter from /metrics. Supported is false when
// the server exports no SGLang metrics (started without --enable-metrics).
func (c *Client) RetractedTotal(ctx context.Context) (Retracted, error) {
	const path = "/metrics"
	data, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return Retracted{}, err
	}
	x, err := parseRetracted(data)
	if err != nil {
		return x, c.invalid(path, err)
	}
	return x, nil
}

func parseRetracted(data []byte) (Retracted, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return Retracted{}, &fieldError{"metrics", err.Error()}
	}
	var x Retracted
	for name := range fams {
		if strings.HasPrefix(name, MetricPrefix) {
			x.Supported = true
			break
		}
	}
	if g, ok := fams[MetricRetractedRecent]; ok {
		for _, m := range g.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				x.Recent += m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				x.Recent += m.GetUntyped().GetValue()
			}
		}
	}
	f, ok := fams[MetricRetractedTotal]
	if !ok {
		return x, nil
	}
	for _, m := range f.GetMetric() {
		x.HasCounter = true
		v := 0.0
		switch {
		case m.GetCounter() != nil:
			v = m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			v = m.GetUntyped().GetValue()
		}
		x.Total += v
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "dp_rank" {
				if r, err := strconv.Atoi(lp.GetValue()); err == nil {
					if x.PerRank == nil {
						x.PerRank = map[int]float64{}
					}
					x.PerRank[r] += v
				}
			}
		}
	}
	return x, nil
}

// IsNotFound reports whether err is an answer saying the server has no such route (HTTP 404 or 405): a
// release before the route.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Code == http.StatusNotFound || se.Code == http.StatusMethodNotAllowed)
}
