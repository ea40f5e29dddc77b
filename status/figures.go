package status

import (
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/draftflow/draftflow/topics"
)

// The record lifecycle's series (package kafka/stream), the same in every stage and labelled by it: a Status's
// Records are the records the stage finished, whatever their result; Rejected those dead-lettered; Tokens the
// tokens their results carried.
const (
	mRecords       = "draftflow_records_total"
	mTokens        = "draftflow_tokens_total"
	stageLabel     = "stage"
	resultLabel    = "result"
	resultRejected = "rejected"
)

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
	out := []string{mRecords, mTokens, mEndpointUp, mInflight, mInflightTokens, mBudget, mKVPool, mKVUsage, mOutputTokens, mRetractions, mRequests}
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
	s.Records, s.Rejected = 0, 0
	for _, m := range f[mRecords] {
		if label(m, stageLabel) != s.Stage {
			continue
		}
		s.Records += int64(value(m))
		if label(m, resultLabel) == resultRejected {
			s.Rejected += int64(value(m))
		}
	}
	s.Tokens = int64(f.sum(mTokens, stageLabel, s.Stage))
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
