package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/status"
)

// dashboardFile is the Grafana dashboard deploy/grafana ships.
const dashboardFile = "../../deploy/grafana/draftflow.json"

// capture is a Registerer that remembers every collector registered through it.
type capture struct {
	prometheus.Registerer
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (c *capture) Register(x prometheus.Collector) error {
	err := c.Registerer.Register(x)
	if err == nil {
		c.mu.Lock()
		c.collectors = append(c.collectors, x)
		c.mu.Unlock()
	}
	return err
}

func (c *capture) MustRegister(xs ...prometheus.Collector) {
	for _, x := range xs {
		if err := c.Register(x); err != nil {
			panic(err)
		}
	}
}

// exported maps every series name a scrape of the stages can show (histograms: name_bucket, name_sum,
// name_count) to its label names.
type exported map[string][]string

var descRE = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// stageMetrics runs a small pipeline as `draftflow run` does (every stage, the Kafka plumbing and the status
// publisher on one registry) and returns what its collectors describe: the series every stage registers when
// it starts, whether or not they have samples yet.
func stageMetrics(t *testing.T) exported {
	t.Helper()
	kc := kafkatest.Config(t, 1)
	kc.Logger = testLogger(t)
	reg := metrics.NewRegistry()
	capt := &capture{Registerer: reg}
	kc.Registerer = capt
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id": "a", "messages": [{"role": "user", "content": "hi"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var rc pipeline.Config
	rc.Kafka, rc.Logger = kc, kc.Logger
	rc.Ingest.Inputs = []string{input}
	rc.Ingest.Defaults.MaxNewTokens = 16
	rc.Ingest.Registerer, rc.Tokenize.Registerer, rc.Generate.Registerer, rc.Sink.Registerer = capt, capt, capt, capt
	rc.Sink.Dir = filepath.Join(dir, "out")
	rc.Sim.Instant, rc.Sim.OutputLenMean = true, 8
	rc.Gatherer, rc.StatusInterval = reg, 100*time.Millisecond
	rc.Timeout = 2 * time.Minute
	if _, err := pipeline.Run(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	out := exported{}
	add := func(name string, labels []string) { out[name] = labels }
	for _, c := range capt.collectors {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		var hist bool
		switch c.(type) {
		case prometheus.Histogram, *prometheus.HistogramVec, prometheus.Summary, *prometheus.SummaryVec:
			hist = true
		}
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read descriptor %s", d)
			}
			var labels []string
			for _, p := range strings.Split(m[2], ",") {
				if name, _, ok := strings.Cut(p, "="); ok {
					labels = append(labels, name)
				}
			}
			for _, l := range strings.Split(m[3], ",") {
				if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
					labels = append(labels, l)
				}
			}
			add(m[1], labels)
			if hist {
				add(m[1]+"_bucket", append(slices.Clone(labels), "le"))
				add(m[1]+"_sum", labels)
				add(m[1]+"_count", labels)
			}
		}
	}
	// The runtime and process series of the registry (no labels).
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, ok := out[mf.GetName()]; !ok {
			add(mf.GetName(), nil)
		}
	}
	return out
}

// promFunctions are the PromQL functions and aggregations a dashboard may call.
var promFunctions = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`sum avg min max count stddev stdvar topk bottomk quantile count_values group
		rate irate increase delta idelta deriv predict_linear resets changes histogram_quantile label_replace label_join
		abs ceil floor round clamp clamp_min clamp_max exp ln log2 log10 sqrt sgn vector scalar time timestamp absent
		absent_over_time avg_over_time min_over_time max_over_time sum_over_time count_over_time last_over_time
		quantile_over_time stddev_over_time present_over_time sort sort_desc`) {
		promFunctions[f] = true
	}
}

// aggregationClause is the grouping clause that may follow an aggregation's name.
var aggregationClause = regexp.MustCompile(`^(by|without)\s*\(`)

// promRefs is what one PromQL expression refers to.
type promRefs struct {
	metrics  []string
	matchers map[string][]string // metric -> label names in its {...}
	grouping []string            // label names in by/without/on/ignoring/group_left/group_right
}

// parsePromQL extracts metric names and label names from a PromQL expression (Grafana's $variables allowed).
func parsePromQL(expr string) (promRefs, error) {
	refs := promRefs{matchers: map[string][]string{}}
	rs := []rune(expr)
	i := 0
	isStart := func(r rune) bool { return r == '_' || r == ':' || unicode.IsLetter(r) }
	isPart := func(r rune) bool { return isStart(r) || unicode.IsDigit(r) }
	ident := func() string {
		j := i
		for i < len(rs) && isPart(rs[i]) {
			i++
		}
		return string(rs[j:i])
	}
	skipSpace := func() {
		for i < len(rs) && unicode.IsSpace(rs[i]) {
			i++
		}
	}
	skipString := func() error {
		q := rs[i]
		for i++; i < len(rs) && rs[i] != q; i++ {
			if rs[i] == '\\' {
				i++
			}
		}
		if i >= len(rs) {
			return fmt.Errorf("unterminated string in %q", expr)
		}
		i++
		return nil
	}
	labelList := func() ([]string, error) { // at '(' of a grouping clause
		i++
		var out []string
		for {
			skipSpace()
			if i >= len(rs) {
				return nil, fmt.Errorf("unterminated label list in %q", expr)
			}
			switch {
			case rs[i] == ')':
				i++
				return out, nil
			case rs[i] == ',':
				i++
			case isStart(rs[i]):
				out = append(out, ident())
			default:
				return nil, fmt.Errorf("unexpected %q in a label list of %q", rs[i], expr)
			}
		}
	}
	lastMetric := ""
	for i < len(rs) {
		r := rs[i]
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '"' || r == '\'' || r == '`':
			if err := skipString(); err != nil {
				return refs, err
			}
		case r == '[':
			for i < len(rs) && rs[i] != ']' {
				i++
			}
			i++
		case r == '{':
			i++
			for {
				skipSpace()
				if i >= len(rs) {
					return refs, fmt.Errorf("unterminated matcher in %q", expr)
				}
				if rs[i] == '}' {
					i++
					break
				}
				if rs[i] == ',' {
					i++
					continue
				}
				if !isStart(rs[i]) {
					return refs, fmt.Errorf("unexpected %q in a matcher of %q", rs[i], expr)
				}
				name := ident()
				skipSpace()
				for i < len(rs) && strings.ContainsRune("=!~", rs[i]) {
					i++
				}
				skipSpace()
				if i >= len(rs) || rs[i] != '"' && rs[i] != '\'' && rs[i] != '`' {
					return refs, fmt.Errorf("matcher %s without a value in %q", name, expr)
				}
				valueStart := i
				if err := skipString(); err != nil {
					return refs, err
				}
				if name == "__name__" {
					lastMetric = strings.Trim(string(rs[valueStart:i]), "\"'`")
					refs.metrics = append(refs.metrics, lastMetric)
					continue
				}
				refs.matchers[lastMetric] = append(refs.matchers[lastMetric], name)
			}
			lastMetric = ""
		case r == '$':
			i++
			ident()
		case unicode.IsDigit(r) || r == '.':
			for i < len(rs) && (isPart(rs[i]) || rs[i] == '.') {
				i++
			}
		case isStart(r):
			name := ident()
			skipSpace()
			next := rune(0)
			if i < len(rs) {
				next = rs[i]
			}
			switch {
			case slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, name):
				if next == '(' {
					labels, err := labelList()
					if err != nil {
						return refs, err
					}
					refs.grouping = append(refs.grouping, labels...)
				}
			case slices.Contains([]string{"and", "or", "unless", "bool", "offset"}, name):
			case promFunctions[name] && aggregationClause.MatchString(string(rs[i:])):
				// an aggregation with its grouping first: sum by (a) (...)
			case next == '(':
				if !promFunctions[name] {
					return refs, fmt.Errorf("unknown function %s in %q", name, expr)
				}
			default:
				refs.metrics = append(refs.metrics, name)
				lastMetric = name
				if next == '{' {
					continue
				}
			}
			lastMetric = name
			if !slices.Contains(refs.metrics, name) {
				lastMetric = ""
			}
		default:
			i++ // operators, parentheses, commas
		}
	}
	return refs, nil
}

// checkExpr returns why expr names a series or a label the stages do not export, or nil.
func checkExpr(expr string, have exported) error {
	refs, err := parsePromQL(expr)
	if err != nil {
		return err
	}
	if len(refs.metrics) == 0 {
		return fmt.Errorf("no metric in %q", expr)
	}
	var all []string
	for _, m := range refs.metrics {
		labels, ok := have[m]
		if !ok {
			return fmt.Errorf("%q names %s, which no stage exports", expr, m)
		}
		all = append(all, labels...)
	}
	for m, labels := range refs.matchers {
		for _, l := range labels {
			if m == "" || !slices.Contains(have[m], l) {
				return fmt.Errorf("%q matches label %s, which %s does not have", expr, l, m)
			}
		}
	}
	for _, l := range refs.grouping {
		if !slices.Contains(all, l) {
			return fmt.Errorf("%q groups by label %s, which none of %v has", expr, l, refs.metrics)
		}
	}
	return nil
}

// dashboardExprs returns every PromQL expression of the dashboard's panels (rows' nested panels included).
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string            `json:"title"`
		Panels  []json.RawMessage `json:"panels"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	}
	out := map[string]string{}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatal(err)
			}
			for _, tg := range p.Targets {
				out[p.Title+"/"+tg.RefID] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// Every expression of the Grafana dashboard names only series the stages export and groups only by labels
// they have; the series the status records are read from are exported too; and the check fails on a bogus
// name, label or function.
func TestGrafanaDashboardNamesExportedMetrics(t *testing.T) {
	have := stageMetrics(t)
	for _, m := range []string{"draftflow_consumer_lag", "draftflow_records_total", "draftflow_tokens_total", "draftflow_generate_request_seconds_bucket"} {
		if _, ok := have[m]; !ok {
			names := make([]string, 0, len(have))
			for n := range have {
				names = append(names, n)
			}
			sort.Strings(names)
			t.Fatalf("the stages' registry lacks %s (have %v)", m, names)
		}
	}
	exprs := dashboardExprs(t)
	if len(exprs) < 15 {
		t.Fatalf("only %d expressions in %s", len(exprs), dashboardFile)
	}
	for where, expr := range exprs {
		if err := checkExpr(expr, have); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
	for _, m := range status.FigureMetrics() {
		if _, ok := have[m]; !ok {
			t.Errorf("status reads %s, which no stage exports", m)
		}
	}

	cases := []struct {
		expr string
		ok   bool
	}{
		{`sum by (group, topic) (draftflow_consumer_lag)`, true},
		{`histogram_quantile(0.95, sum by (le, endpoint) (rate(draftflow_generate_request_seconds_bucket[$__rate_interval])))`, true},
		{`sum(rate(draftflow_generate_request_seconds_count[5m])) / sum(rate(draftflow_generate_request_seconds_sum[5m]))`, true},
		{`sum(rate(draftflow_records_total{stage="generate", result="generated"}[1m])) by (result)`, true},
		{`sum by (stage, class) (increase(draftflow_records_total{result!="rejected"}[5m]))`, true},
		{`{__name__="draftflow_sink_rows_total"}`, true},
		{`sum(rate(draftflow_bogus_records_total[5m]))`, false},
		{`draftflow_consumer_lagg`, false},
		{`sum by (endpoint) (draftflow_consumer_lag)`, false},
		{`sum(draftflow_records_total{outcome="ok"})`, false},
		{`sum(rate(draftflow_generate_records_total[5m]))`, false},
		{`sum(rte(draftflow_sink_rows_total[5m]))`, false},
		{`rate(draftflow_sink_rows_total_bucket[5m])`, false},
		{`{__name__="draftflow_nope"}`, false},
		{`1 + 2`, false},
	}
	for _, c := range cases {
		err := checkExpr(c.expr, have)
		if (err == nil) != c.ok {
			t.Errorf("checkExpr(%s) = %v, want ok %v", c.expr, err, c.ok)
		}
	}
}
