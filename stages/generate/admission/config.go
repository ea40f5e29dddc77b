package admission

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/secret"
)

// Admission policies accepted by Config.Policy.
const (
	// PolicyKVBudget admits requests against a per-endpoint budget of KV tokens (the default).
	PolicyKVBudget = "kv-budget"
	// PolicyFixed keeps at most Config.Concurrency requests in flight per endpoint.
	PolicyFixed = "fixed"
)

// Routing strategies accepted by Config.Routing.
const (
	// RouteHeadroom sends each request to the endpoint with the most free budget (the default).
	RouteHeadroom = "headroom"
	// RouteRoundRobin cycles over the endpoints, skipping those without room (SpecForge's strategy).
	RouteRoundRobin = "round-robin"
)

// Defaults applied to zero Config and BudgetConfig fields.
const (
	// DefaultConcurrency is Config.Concurrency's default.
	DefaultConcurrency = 64
	// DefaultMaxNewTokens is Config.DefaultMaxNewTokens's default.
	DefaultMaxNewTokens = 4096
	// DefaultRequestTimeout is Config.RequestTimeout's default.
	DefaultRequestTimeout = 30 * time.Minute
	// DefaultQuantile is BudgetConfig.Quantile's default.
	DefaultQuantile = 0.9
	// DefaultLengthWindow is BudgetConfig.Window's default.
	DefaultLengthWindow = 512
	// DefaultTargetUsage is BudgetConfig.TargetUsage's default.
	DefaultTargetUsage = 0.96
	// DefaultPollInterval is BudgetConfig.PollInterval's default.
	DefaultPollInterval = time.Second
	// DefaultHealthInterval is Config.HealthInterval's default.
	DefaultHealthInterval = 5 * time.Second
	// DefaultUnreachableTimeout is Config.UnreachableTimeout's default.
	DefaultUnreachableTimeout = 15 * time.Minute
	// DefaultHealthFailures is Config.HealthFailures's default.
	DefaultHealthFailures = 2
	// DefaultMaxServerErrors is Config.MaxServerErrors's default.
	DefaultMaxServerErrors = 8
	// DefaultMaxTimeouts is Config.MaxTimeouts's default.
	DefaultMaxTimeouts = 3
	// DefaultMinServerQueue is BudgetConfig.MinServerQueue's default.
	DefaultMinServerQueue = 2
	// DefaultMaxServerQueue is BudgetConfig.MaxServerQueue's default.
	DefaultMaxServerQueue = 8
	// DefaultInitialBudgetFactor is BudgetConfig.InitialFactor's default.
	DefaultInitialBudgetFactor = 1.0
	// DefaultSafeCompletions is BudgetConfig.SafeCompletions's default.
	DefaultSafeCompletions = 8
	// DefaultSafeFraction is BudgetConfig.SafeFraction's default.
	DefaultSafeFraction = 0.25
	// DefaultHeadroomOutputs is BudgetConfig.HeadroomOutputs's default.
	DefaultHeadroomOutputs = 5
)

// DefaultLane is the lane of records that name none and match no configured lane.
const DefaultLane = "default"

// Lane is a scheduling class: the records of some datasets, or of one length class, that share a
// max_new_tokens default, a length estimate and a guaranteed share of every endpoint's budget.
type Lane struct {
	// Name identifies the lane; records pick it through Sampling.Lane or their dataset.
	Name string
	// MaxNewTokens applies to records of the lane that set none themselves (0: Config.DefaultMaxNewTokens).
	MaxNewTokens int
	// Share is the fraction of each endpoint's budget the lane is guaranteed when it has work waiting
	// (default: an equal split of what the other lanes leave). A lane may use more while no other lane waits.
	Share float64
	// Datasets are the datasets whose records fall in this lane when they name no lane.
	Datasets []string
}

// ParseLane parses a --lane value: NAME[,max_new_tokens=N][,share=F][,datasets=A|B|C].
func ParseLane(s string) (Lane, error) {
	parts := strings.Split(s, ",")
	l := Lane{Name: strings.TrimSpace(parts[0])}
	if l.Name == "" || strings.Contains(l.Name, "=") {
		return l, fmt.Errorf("lane %q: first element must be the lane name", s)
	}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			return l, fmt.Errorf("lane %q: %q is not key=value", s, p)
		}
		switch strings.ReplaceAll(strings.ToLower(k), "-", "_") {
		case "max_new_tokens":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return l, fmt.Errorf("lane %q: max_new_tokens %q is not a positive integer", s, v)
			}
			l.MaxNewTokens = n
		case "share":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 || f > 1 {
				return l, fmt.Errorf("lane %q: share %q is not in (0,1]", s, v)
			}
			l.Share = f
		case "datasets":
			for _, d := range strings.Split(v, "|") {
				if d = strings.TrimSpace(d); d != "" {
					l.Datasets = append(l.Datasets, d)
				}
			}
		default:
			return l, fmt.Errorf("lane %q: unknown key %q (want max_new_tokens, share, datasets)", s, k)
		}
	}
	return l, nil
}

// String renders the lane in ParseLane's syntax.
func (l Lane) String() string {
	s := l.Name
	if l.MaxNewTokens > 0 {
		s += ",max_new_tokens=" + strconv.Itoa(l.MaxNewTokens)
	}
	if l.Share > 0 {
		s += ",share=" + strconv.FormatFloat(l.Share, 'g', -1, 64)
	}
	if len(l.Datasets) > 0 {
		s += ",datasets=" + strings.Join(l.Datasets, "|")
	}
	return s
}

// BudgetConfig tunes the kv-budget policy. Zero values are the documented defaults.
type BudgetConfig struct {
	// Quantile of finished output lengths charged to an in-flight request (default 0.9).
	Quantile float64
	// Window is how many recent completions per dataset/lane the estimate keeps (default 512), so it follows a
	// workload whose lengths shift.
	Window int
	// PriorOutputTokens is the expected output length before any completion of a dataset/lane was seen
	// (default: the request's max_new_tokens, the safe choice).
	PriorOutputTokens int
	// TargetUsage is the KV token usage above which no request goes to an endpoint (default 0.96): the pool
	// must keep room for the running requests' next tokens, or the server retracts.
	TargetUsage float64
	// InitialFactor sets an endpoint's first budget as a multiple of its KV pool (default 1.0).
	InitialFactor float64
	// MinServerQueue and MaxServerQueue bound the band of waiting requests the budget keeps on each server
	// (defaults 2 and 8; both grow with the running batch, to a sixth and a third of it): below the band the
	// budget grows, above it the budget shrinks. A few waiting requests keep the server busy between a
	// completion and the next arrival; many mean the budget admits more than the server runs.
	MinServerQueue, MaxServerQueue int
	// PollInterval is how often /v1/loads and /metrics are polled for feedback (default 1 s).
	PollInterval time.Duration
	// SafeCompletions is how many of an endpoint's running requests must be expected to finish before their
	// growth fills the KV pool for another request to go to it (default 8, at most SafeFraction of them; see
	// Controller's KV gate). Higher is safer against retractions and runs the pool emptier.
	SafeCompletions float64
	// SafeFraction caps SafeCompletions at this fraction of the requests in flight on the endpoint (default
	// 0.25; negative: no cap), so a small pool's small batch is not asked for as many completions as a large
	// one's.
	SafeFraction float64
	// HeadroomOutputs is the gate's backstop: once an endpoint's pool is half full, a request goes to it only
	// while the KV of this many recent mean output lengths stays free (default 5).
	HeadroomOutputs float64
}

// Config configures a Controller: the servers, the admission policy and its budgets, the lanes, the retry and
// health timings. The zero value of every field but Endpoints is a documented default.
type Config struct {
	// Endpoints are SGLang base URLs ("http://host:30000").
	Endpoints []string
	// APIKey is sent as "Authorization: Bearer" to servers started with --api-key (the stage's flag
	// --sglang-api-key-file, environment DRAFTFLOW_SGLANG_API_KEY). A server refusing it (HTTP 401/403) is
	// fatal (see Controller.Fatal): the stage stops with an error naming the server.
	APIKey secret.Value
	// Policy is PolicyKVBudget (default) or PolicyFixed.
	Policy string
	// Concurrency is the per-endpoint in-flight limit of PolicyFixed (default 64). Under PolicyKVBudget it is
	// ignored.
	Concurrency int
	// Routing is RouteHeadroom (default) or RouteRoundRobin.
	Routing string
	// Lanes are the scheduling classes; with none, every request is in DefaultLane.
	Lanes []Lane
	// DefaultMaxNewTokens applies to records whose sampling settings and lane set none (default 4096).
	DefaultMaxNewTokens int
	// RequestTimeout bounds one attempt of one request (default 30 min); a timed-out request is aborted on the
	// server and retried, up to MaxTimeouts attempts.
	RequestTimeout time.Duration
	// MaxTimeouts is how many attempts of one request may run into RequestTimeout before it is rejected (the
	// stage dead-letters it), so a request the servers never finish cannot hold back its partition's commits
	// (default 3). Attempts cut short because their endpoint was drained do not count.
	MaxTimeouts int
	// MaxServerErrors is how many HTTP 500 answers one request may get before it is rejected as a request the
	// server cannot process (default 8). Connection errors and 503s are retried without limit.
	MaxServerErrors int
	// RetryInitial and RetryMax bound the exponential backoff between attempts of one request (defaults
	// 250 ms and 30 s).
	RetryInitial, RetryMax time.Duration
	// HealthInterval is how often every endpoint's /health is checked (default 5 s).
	HealthInterval time.Duration
	// HealthFailures is how many consecutive failed checks (or connection errors) drain an endpoint (default 2).
	HealthFailures int
	// UnreachableTimeout is how long, from NewController, Probe keeps failing while no endpoint has answered
	// at all (connections refused, nothing listening: a wrong --sglang, or a server not started) before the
	// Controller fails (default DefaultUnreachableTimeout; negative: never). An endpoint that answers
	// anything, such as 503 while SGLang warms up, or that answered once and is restarting, is never given up
	// on. SGLang listens only once its weights are loaded: raise it for a server started with the stage.
	UnreachableTimeout time.Duration
	// Budget tunes PolicyKVBudget.
	Budget BudgetConfig
	// HTTPClient sends requests to the servers (default: a client with pooled keep-alive connections and
	// no overall timeout; RequestTimeout bounds each attempt).
	HTTPClient *http.Client
	// Registerer receives the Controller's metrics (default prometheus.DefaultRegisterer).
	Registerer prometheus.Registerer
	// Logger receives the Controller's logs (default slog.Default()).
	Logger *slog.Logger
	// Clock tells the Controller the time (default time.Now). A driver on another clock (the benchmark's
	// discrete-event simulation, on simulated time) injects its own.
	Clock func() time.Time
}

// WithDefaults returns a copy with zero values replaced by defaults.
func (c Config) WithDefaults() Config {
	if c.Policy == "" {
		c.Policy = PolicyKVBudget
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Routing == "" {
		c.Routing = RouteHeadroom
	}
	if c.DefaultMaxNewTokens <= 0 {
		c.DefaultMaxNewTokens = DefaultMaxNewTokens
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxServerErrors <= 0 {
		c.MaxServerErrors = DefaultMaxServerErrors
	}
	if c.MaxTimeouts <= 0 {
		c.MaxTimeouts = DefaultMaxTimeouts
	}
	if c.RetryInitial <= 0 {
		c.RetryInitial = 250 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 30 * time.Second
	}
	if c.UnreachableTimeout == 0 {
		c.UnreachableTimeout = DefaultUnreachableTimeout
	}
	if c.HealthInterval <= 0 {
		c.HealthInterval = DefaultHealthInterval
	}
	if c.HealthFailures <= 0 {
		c.HealthFailures = DefaultHealthFailures
	}
	b := &c.Budget
	if b.Quantile <= 0 || b.Quantile > 1 {
		b.Quantile = DefaultQuantile
	}
	if b.Window <= 0 {
		b.Window = DefaultLengthWindow
	}
	if b.TargetUsage <= 0 || b.TargetUsage > 1 {
		b.TargetUsage = DefaultTargetUsage
	}
	if b.InitialFactor <= 0 {
		b.InitialFactor = DefaultInitialBudgetFactor
	}
	if b.MinServerQueue <= 0 {
		b.MinServerQueue = DefaultMinServerQueue
	}
	if b.MaxServerQueue <= 0 {
		b.MaxServerQueue = DefaultMaxServerQueue
	}
	if b.PollInterval <= 0 {
		b.PollInterval = DefaultPollInterval
	}
	if b.SafeCompletions <= 0 {
		b.SafeCompletions = DefaultSafeCompletions
	}
	if b.HeadroomOutputs <= 0 {
		b.HeadroomOutputs = DefaultHeadroomOutputs
	}
	if b.SafeFraction == 0 {
		b.SafeFraction = DefaultSafeFraction
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.DefaultRegisterer
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	return c
}

// Validate reports a configuration a Controller cannot run with. c must have defaults applied.
func (c Config) Validate() error {
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("generate: no SGLang endpoints (--sglang or --sglang-file)"))
	}
	seen := map[string]bool{}
	for _, e := range c.Endpoints {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("generate: endpoint %q is not an http(s) URL", e))
		}
		if seen[e] {
			errs = append(errs, fmt.Errorf("generate: endpoint %q given twice", e))
		}
		seen[e] = true
	}
	switch c.Policy {
	case PolicyKVBudget, PolicyFixed:
	default:
		errs = append(errs, fmt.Errorf("generate: unknown policy %q (want %s or %s)", c.Policy, PolicyKVBudget, PolicyFixed))
	}
	switch c.Routing {
	case RouteHeadroom, RouteRoundRobin:
	default:
		errs = append(errs, fmt.Errorf("generate: unknown routing %q (want %s or %s)", c.Routing, RouteHeadroom, RouteRoundRobin))
	}
	names := map[string]bool{}
	share := 0.0
	for _, l := range c.Lanes {
		if names[l.Name] {
			errs = append(errs, fmt.Errorf("generate: lane %q defined twice", l.Name))
		}
		names[l.Name] = true
		share += l.Share
	}
	if share > 1+1e-9 {
		errs = append(errs, fmt.Errorf("generate: lane shares add up to %.3g, over 1", share))
	}
	return errors.Join(errs...)
}
