package generate

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/draftflow/draftflow/kafka"
	dfmetrics "github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/secret"

	"github.com/prometheus/client_golang/prometheus"
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

// Defaults applied to zero Config fields.
const (
	DefaultGroup          = "draftflow-generate"
	DefaultConcurrency    = 64
	DefaultMaxNewTokens   = 4096
	DefaultRequestTimeout = 30 * time.Minute
	DefaultMaxInFlight    = 4096
	DefaultQuantile       = 0.9
	DefaultLengthWindow   = 512
	DefaultTargetUsage    = 0.96
	DefaultPollInterval   = time.Second
	DefaultHealthInterval = 5 * time.Second
	// DefaultUnreachableTimeout is Config.UnreachableTimeout's default.
	DefaultUnreachableTimeout  = 15 * time.Minute
	DefaultHealthFailures      = 2
	DefaultMaxServerErrors     = 8
	DefaultMaxTimeouts         = 3
	DefaultMinServerQueue      = 2
	DefaultMaxServerQueue      = 8
	DefaultInitialBudgetFactor = 1.0
	DefaultSafeCompletions     = 8
	DefaultSafeFraction        = 0.25
	DefaultHeadroomOutputs     = 5
)

// DefaultRevokeTimeout is Config.RevokeTimeout's default: measured with `make rebalance` (2,400 prompts,
// requests of 1-20 s), 20 s aborted 13% of the decode work at a rebalance and 60 s none, for a drain of 22 s.
const DefaultRevokeTimeout = 60 * time.Second

// DefaultShutdownGrace is the command line's --shutdown-grace: what fits in a container runtime's default
// stop timeout (Kubernetes: 30 s) with the consumer's final commit, so a replica scaled in or stopped by hand
// finishes its short requests instead of handing them to another replica to do again.
const DefaultShutdownGrace = 25 * time.Second

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

// Config configures the generate stage and its Controller. The zero value of every field but Kafka and
// Endpoints is a documented default.
type Config struct {
	// Kafka says how to reach the brokers.
	Kafka kafka.Config
	// Group is the consumer group (default "draftflow-generate").
	Group string
	// Endpoints are SGLang base URLs ("http://host:30000").
	Endpoints []string
	// APIKey is sent as "Authorization: Bearer" to servers started with --api-key (flag
	// --sglang-api-key-file, environment DRAFTFLOW_SGLANG_API_KEY). A server refusing it (HTTP 401/403)
	// stops the stage with an error naming the server.
	APIKey secret.Value
	// Policy is PolicyKVBudget (default) or PolicyFixed.
	Policy string
	// Concurrency is the per-endpoint in-flight limit of PolicyFixed (default 64). Under PolicyKVBudget it is
	// ignored.
	Concurrency int
	// Routing is RouteHeadroom (default) or RouteRoundRobin.
	Routing string
	// Lanes are the scheduling classes; with none, every record is in DefaultLane.
	Lanes []Lane
	// DefaultMaxNewTokens applies to records whose sampling settings and lane set none (default 4096).
	DefaultMaxNewTokens int
	// Override replaces sampling settings of every record (none by default).
	Override Override
	// RequestTimeout bounds one attempt of one request (default 30 min); a timed-out request is aborted on the
	// server and retried, up to MaxTimeouts attempts.
	RequestTimeout time.Duration
	// MaxTimeouts is how many attempts of one request may run into RequestTimeout before it is dead-lettered,
	// so a request the servers never finish cannot hold back its partition's commits (default 3). Attempts
	// cut short because their endpoint was drained do not count.
	MaxTimeouts int
	// MaxServerErrors is how many HTTP 500 answers one request may get before it is dead-lettered as a request
	// the server cannot process (default 8). Connection errors and 503s are retried without limit.
	MaxServerErrors int
	// RetryInitial and RetryMax bound the exponential backoff between attempts of one request (defaults
	// 250 ms and 30 s).
	RetryInitial, RetryMax time.Duration
	// MaxInFlight bounds records fetched and not yet finished (default 4096); it must exceed what the
	// endpoints can run at once, or it becomes the limit.
	MaxInFlight int
	// RevokeTimeout is how long, on a rebalance (a replica joining or leaving), requests already running for the
	// partitions this replica gives up may still finish before they are aborted and left to the next owner
	// (default DefaultRevokeTimeout). Requests not yet started are handed over at once. Longer wastes less of
	// long generations; the group waits for the slowest drain (kafka-go rebalances eagerly), at most this long.
	RevokeTimeout time.Duration
	// ShutdownGrace is how long in-flight requests may still finish after shutdown begins before they are
	// aborted (they are redelivered, and done again by whoever owns their partition next). The zero value
	// aborts at once; the command line defaults to DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// ShardsWait is how long Run waits at start, before it consumes anything, for a sink to say what its shards
	// hold (topics.TopicShards) when none has on this namespace yet; meanwhile nothing is sent that the shards
	// may hold. After it, every record is sent until a sink says. The zero value does not wait (Run still reads
	// what the topic holds first); the command line defaults to DefaultShardsWait.
	ShardsWait time.Duration
	// HealthInterval is how often every endpoint's /health is checked (default 5 s).
	HealthInterval time.Duration
	// HealthFailures is how many consecutive failed checks (or connection errors) drain an endpoint (default 2).
	HealthFailures int
	// UnreachableTimeout is how long the stage waits, from its start, while no endpoint has answered at all
	// (connections refused, nothing listening: a wrong --sglang, or a server not started) before it gives up
	// with an error (default DefaultUnreachableTimeout; negative: never). An endpoint that answers anything,
	// such as 503 while SGLang warms up, or that answered once and is restarting, is never given up on.
	// SGLang listens only once its weights are loaded: raise it for a server started with the stage.
	UnreachableTimeout time.Duration
	// Budget tunes PolicyKVBudget.
	Budget BudgetConfig
	// HTTPClient sends requests to the servers (default: a client with pooled keep-alive connections and
	// no overall timeout; RequestTimeout bounds each attempt).
	HTTPClient *http.Client
	// Registerer receives the stage's metrics (default prometheus.DefaultRegisterer).
	Registerer prometheus.Registerer
	// Ready, when set, gets the stage's readiness check (Run only): it owns partitions of the tokenized topic
	// and at least one endpoint is up.
	Ready *dfmetrics.Readiness
	// Logger receives the stage's logs (default slog.Default()).
	Logger *slog.Logger
	// Clock tells the Controller the time (default time.Now). A discrete-event simulation that drives the
	// Controller through Offer, Finish and Feedback on simulated time injects its own (stages/generate/bench).
	Clock func() time.Time
}

// withDefaults returns a copy with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Policy == "" {
		c.Policy = PolicyKVBudget
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Routing == "" {
		c.Routing = RouteHeadroom
	}
	if c.RevokeTimeout <= 0 {
		c.RevokeTimeout = DefaultRevokeTimeout
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
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
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

// validate reports a configuration the stage cannot run with. c must have defaults applied.
func (c Config) validate() error {
	var errs []error
	if err := c.Override.validate(); err != nil {
		errs = append(errs, err)
	}
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

// RegisterFlags binds the stage's settings to flags: --sglang (repeatable), --sglang-file, --policy,
// --sglang-api-key-file, --concurrency, --routing, --max-new-tokens, --lane (repeatable), --request-timeout, --max-timeouts, --group,
// --max-in-flight, --shutdown-grace, --shards-wait, --health-interval, --kv-quantile, --kv-target-usage, --kv-poll-interval,
// --kv-safe-completions, --kv-safe-fraction, --kv-headroom-outputs. Kafka settings and the metrics endpoint
// are the caller's.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("sglang", "SGLang base URL, e.g. http://host:30000 (repeatable)", func(s string) error {
		for _, u := range strings.Split(s, ",") {
			if u = strings.TrimSpace(u); u != "" {
				c.Endpoints = append(c.Endpoints, strings.TrimRight(u, "/"))
			}
		}
		return nil
	})
	fs.Func("sglang-file", "file listing SGLang base URLs, one per line (# comments)", func(path string) error {
		urls, err := ReadEndpointsFile(path)
		if err != nil {
			return err
		}
		c.Endpoints = append(c.Endpoints, urls...)
		return nil
	})
	if key := strings.TrimSpace(os.Getenv(APIKeyEnv)); key != "" && c.APIKey.IsZero() {
		c.APIKey = secret.New(key)
	}
	fs.Func("sglang-api-key-file", "file holding the API key of servers started with --api-key (else $"+APIKeyEnv+")",
		func(path string) error {
			key, err := ReadAPIKeyFile(path)
			if err != nil {
				return err
			}
			c.APIKey = key
			return nil
		})
	fs.StringVar(&c.Group, "group", DefaultGroup, "consumer group")
	fs.StringVar(&c.Policy, "policy", PolicyKVBudget, "admission policy: kv-budget or fixed")
	fs.IntVar(&c.Concurrency, "concurrency", DefaultConcurrency, "in-flight requests per endpoint (policy fixed)")
	fs.StringVar(&c.Routing, "routing", RouteHeadroom, "endpoint choice: headroom or round-robin")
	fs.IntVar(&c.DefaultMaxNewTokens, "max-new-tokens", DefaultMaxNewTokens, "max_new_tokens of records whose settings and lane set none")
	c.Override.registerFlags(fs)
	fs.Func("lane", "scheduling lane NAME[,max_new_tokens=N][,share=F][,datasets=A|B] (repeatable)", func(s string) error {
		l, err := ParseLane(s)
		if err != nil {
			return err
		}
		c.Lanes = append(c.Lanes, l)
		return nil
	})
	fs.DurationVar(&c.RequestTimeout, "request-timeout", DefaultRequestTimeout, "limit of one request attempt")
	fs.IntVar(&c.MaxTimeouts, "max-timeouts", DefaultMaxTimeouts, "attempts of one request that may time out before it is dead-lettered")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", DefaultMaxInFlight, "records fetched and not yet finished")
	fs.DurationVar(&c.RevokeTimeout, "revoke-timeout", DefaultRevokeTimeout, "on a rebalance, time running requests of partitions given up may finish before they are aborted and left to the next owner")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", DefaultShutdownGrace, "time in-flight requests may finish after SIGTERM before they are aborted and redelivered (0: abort at once; a second signal always does)")
	fs.DurationVar(&c.ShardsWait, "shards-wait", DefaultShardsWait, "at start, how long to wait for a sink to say what its shards hold (shards topic) when none has yet, so that no turn in the shards is generated again (0: do not wait)")
	fs.DurationVar(&c.HealthInterval, "health-interval", DefaultHealthInterval, "endpoint health check interval")
	fs.DurationVar(&c.UnreachableTimeout, "unreachable-timeout", DefaultUnreachableTimeout, "give up when no --sglang endpoint has answered at all "+
		"(connections refused) for this long since the start (negative: never); a server that answers, even 503 while loading, is waited for")
	fs.Float64Var(&c.Budget.Quantile, "kv-quantile", DefaultQuantile, "quantile of learnt output lengths charged per request (kv-budget)")
	fs.Float64Var(&c.Budget.TargetUsage, "kv-target-usage", DefaultTargetUsage, "KV token usage the budget steers to (kv-budget)")
	fs.DurationVar(&c.Budget.PollInterval, "kv-poll-interval", DefaultPollInterval, "server load polling interval (kv-budget)")
	fs.Float64Var(&c.Budget.SafeCompletions, "kv-safe-completions", DefaultSafeCompletions,
		"running requests expected to finish before the pool fills, for another request to go (kv-budget; higher: fewer retractions, emptier pool)")
	fs.Float64Var(&c.Budget.SafeFraction, "kv-safe-fraction", DefaultSafeFraction,
		"cap on --kv-safe-completions as a fraction of the requests in flight on an endpoint (kv-budget; negative: none)")
	fs.Float64Var(&c.Budget.HeadroomOutputs, "kv-headroom-outputs", DefaultHeadroomOutputs,
		"mean output lengths of KV kept free once the pool is half full (kv-budget)")
}

// APIKeyEnv is the environment variable holding the SGLang API key when no --sglang-api-key-file is given.
const APIKeyEnv = "DRAFTFLOW_SGLANG_API_KEY"

// ReadAPIKeyFile reads an API key from a file: its content without surrounding whitespace. Errors never
// include the content.
func ReadAPIKeyFile(path string) (secret.Value, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return secret.Value{}, fmt.Errorf("generate: API key file: %w", err)
	}
	key := strings.TrimSpace(string(data))
	if key == "" {
		return secret.Value{}, fmt.Errorf("generate: API key file %s is empty", path)
	}
	if strings.ContainsAny(key, "\r\n") {
		return secret.Value{}, fmt.Errorf("generate: API key file %s holds more than one line", path)
	}
	return secret.New(key), nil
}

// ReadEndpointsFile reads SGLang base URLs, one per line; blank lines and # comments are skipped.
func ReadEndpointsFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("generate: endpoints file: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, strings.TrimRight(line, "/"))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("generate: endpoints file %s: %w", path, err)
	}
	return out, nil
}
