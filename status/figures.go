package status

import (
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/draftflow/draftflow/topics"
)

// figureNames names, per stage, the series a Status's Records, Rejected and Tokens are read from: Records is
// the sum of the done, rejected and pending series, Tokens the sum of the tokens series over all labels.
type figureNames struct {
	done, rejected, tokens string
	// pending is a gauge of records taken in but not done yet (the sink's buffered rows, made durable only at
	// its next flush, minutes later): counted as records, so the stage's rate shows its work as it happens.
	pending string
	// doneLabel, when set, selects the series of done (name=value) and of rejected (name=rejectedValue) from
	// one counter labelled by result.
	doneLabel, doneValue, rejectedValue string
}

// stageFigures are the series each stage exports that its Status counts are read from.
var stageFigures = map[string]figureNames{
	"ingest":   {done: "draftflow_ingest_prompts_total", rejected: "draftflow_ingest_rejected_total"},
	"tokenize": {done: "draftflow_tokenize_prompts_total", rejected: "draftflow_tokenize_rejected_total", tokens: "draftflow_tokenize_tokens_total"},
	"generate": {done: "draftflow_generate_records_total", rejected: "draftflow_generate_records_total",
		tokens: "draftflow_generate_output_tokens_total", doneLabel: "result", doneValue: "generated", rejectedValue: "rejected"},
	"sink": {done: "draftflow_sink_rows_total", rejected: "draftflow_sink_rejected_total", tokens: "draftflow_sink_tokens_total",
		pending: "draftflow_sink_buffered_rows"},
}

// The generate stage's per-endpoint series (label "endpoint") a Status's Endpoints are read from.
const (
	mEndpointUp       = "draftflow_generate_endpoint_up"
	mInflight         = "draftflow_generate_inflight_requests"
	mInflightTokens   = "draftflow_generate_inflight_tokens"
	mBudget           = "draftflow_generate_budget"
	mKVPool           = "draftflow_generate_kv_pool_tokens"
	mKVUsage          = "draftflow_generate_server_token_usage"
	mOutputTokens     = "draftflow_generate_output_tokens_total"
	mRetractions      = "draftflow_generate_retractions_total"
	mRequests         = "draftflow_generate_requests_total"
	endpointLabel     = "endpoint"
	requestsOutcome   = "outcome"
	requestsOutcomeOK = "ok"
)

// FigureMetrics returns the name of every series Publish reads, sorted: each must be one a stage exports.
func FigureMetrics() []string {
	set := map[string]bool{}
	for _, f := range stageFigures {
		for _, n := range []string{f.done, f.rejected, f.tokens, f.pending} {
			if n != "" {
				set[n] = true
			}
		}
	}
	for _, n := range []string{mEndpointUp, mInflight, mInflightTokens, mBudget, mKVPool, mKVUsage, mOutputTokens, mRetractions, mRequests} {
		set[n] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// families indexes a gathered registry by metric name.
type families map[string][]*dto.Metric

func gather(g prometheus.Gatherer) (families, error) {
	mfs, err := g.Gather()
	out := families{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetMetric()
	}
	return out, err
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// sum adds the series of name whose label key (when key is set) equals val.
func (f families) sum(name, key, val string) float64 {
	total := 0.0
	for _, m := range f[name] {
		if key == "" || label(m, key) == val {
			total += value(m)
		}
	}
	return total
}

// figures fills s's counters and, for generate, its endpoints from the gathered registry.
func (f families) figures(s *topics.Status) {
	names, ok := stageFigures[s.Stage]
	if !ok {
		return
	}
	done := f.sum(names.done, names.doneLabel, names.doneValue)
	rejected := f.sum(names.rejected, names.doneLabel, names.rejectedValue)
	s.Rejected = int64(rejected)
	s.Records = int64(done + rejected)
	if names.pending != "" {
		s.Records += int64(f.sum(names.pending, "", ""))
	}
	if names.tokens != "" {
		s.Tokens = int64(f.sum(names.tokens, "", ""))
	}
	if s.Stage == "generate" {
		s.Endpoints = f.endpoints()
	}
}

// endpoints returns the generate stage's endpoints, by name.
func (f families) endpoints() []topics.EndpointStatus {
	byName := map[string]*topics.EndpointStatus{}
	get := func(m *dto.Metric) *topics.EndpointStatus {
		name := label(m, endpointLabel)
		e := byName[name]
		if e == nil {
			e = &topics.EndpointStatus{Name: name}
			byName[name] = e
		}
		return e
	}
	for _, m := range f[mEndpointUp] {
		get(m).Up = value(m) == 1
	}
	for _, m := range f[mInflight] {
		get(m).InFlight = int64(value(m))
	}
	for _, m := range f[mInflightTokens] {
		get(m).InFlightTokens = value(m)
	}
	for _, m := range f[mBudget] {
		get(m).Budget = value(m)
	}
	for _, m := range f[mKVPool] {
		get(m).KVPoolTokens = int64(value(m))
	}
	for _, m := range f[mKVUsage] {
		get(m).KVUsage = value(m)
	}
	for _, m := range f[mOutputTokens] {
		get(m).OutputTokens = int64(value(m))
	}
	for _, m := range f[mRetractions] {
		get(m).Retractions = int64(value(m))
	}
	for _, m := range f[mRequests] {
		if label(m, requestsOutcome) == requestsOutcomeOK {
			get(m).Requests += int64(value(m))
		}
	}
	out := make([]topics.EndpointStatus, 0, len(byName))
	for _, e := range byName {
		if e.Name != "" {
			out = append(out, *e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].Name, out[j].Name) < 0 })
	return out
}
