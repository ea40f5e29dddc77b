package generate

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka"
	dfmetrics "github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/secret"
	"github.com/draftflow/draftflow/stages/generate/admission"
)

// Admission policies accepted by Config.Policy.
const (
	// PolicyKVBudget admits requests against a per-endpoint budget of KV tokens (the default).
	PolicyKVBudget = admission.PolicyKVBudget
	// PolicyFixed keeps at most Config.Concurrency requests in flight per endpoint.
	PolicyFixed = admission.PolicyFixed
)

// Routing strategies accepted by Config.Routing.
const (
	// RouteHeadroom sends each request to the endpoint with the most free budget (the default).
	RouteHeadroom = admission.RouteHeadroom
	// RouteRoundRobin cycles over the endpoints, skipping those without room (SpecForge's strategy).
	RouteRoundRobin = admission.RouteRoundRobin
)

// DefaultGroup is Config.Group's default.
const DefaultGroup = "draftflow-generate"

// DefaultMaxInFlight is Config.MaxInFlight's default.
const DefaultMaxInFlight = 4096

// DefaultRevokeTimeout is Config.RevokeTimeout's default: measured with `make rebalance` (2,400 prompts,
// requests of 1-20 s), 20 s aborted 13% of the decode work at a rebalance and 60 s none, for a drain of 22 s.
const DefaultRevokeTimeout = 60 * time.Second

// DefaultShutdownGrace is the command line's --shutdown-grace: what fits in a container runtime's default
// stop timeout (Kubernetes: 30 s) with the consumer's final commit, so a replica scaled in or stopped by hand
// finishes its short requests instead of handing them to another replica to do again.
const DefaultShutdownGrace = 25 * time.Second

// DefaultLane is the lane of records that name none and match no configured lane.
const DefaultLane = admission.DefaultLane

// Lane is a scheduling class: the records of some datasets, or of one length class, that share a
// max_new_tokens default, a length estimate and a guaranteed share of every endpoint's budget. See ParseLane.
type Lane = admission.Lane

// ParseLane parses a --lane value: NAME[,max_new_tokens=N][,share=F][,datasets=A|B|C].
func ParseLane(s string) (Lane, error) { return admission.ParseLane(s) }

// BudgetConfig tunes the kv-budget policy. Zero values are the documented defaults.
type BudgetConfig = admission.BudgetConfig

// Config configures the generate stage and its Controller. The zero value of every field but Client and
// Endpoints is a documented default.
type Config struct {
	// Config is the admission Controller's: the SGLang endpoints, the API key, the policy and its budgets, the
	// lanes, the retry and health timings and the HTTP client. Its Registerer and Logger are the stage's too.
	admission.Config
	// Client is the process's client of the cluster (required); Run does not close it.
	Client *kafka.Client
	// InputNamespace, when set, is the namespace the tokenized topic is read from instead of the Client's; the
	// group, outputs and dead letters stay in the Client's.
	InputNamespace string
	// Group is the consumer group (default "draftflow-generate").
	Group string
	// Override replaces sampling settings of every record (none by default).
	Override Override
	// Loops says whether and how replies are watched for repetition loops (default: not watched, LoopOff).
	Loops LoopsConfig
	// MaxInFlight bounds records fetched and not yet finished (default 4096); it must exceed what the
	// endpoints can run at once, or it becomes the limit.
	MaxInFlight int
	// RevokeTimeout is how long, on a rebalance (a replica joining or leaving), requests already running for the
	// partitions this replica gives up may still finish before they are aborted and left to the next owner
	// (default DefaultRevokeTimeout). Requests not yet started are handed over at once. Longer wastes less of
	// long generations; only the partitions that move wait (rebalances are cooperative), and they reach their new
	// owner after the slowest drain, at most this long.
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
	// AnswersDir, when set, is where every answered generation is journaled (package stages/generate/answers)
	// before it is produced: a stage started again on the same directory produces an answer it finds there
	// instead of asking a server again (a kill then loses no answer that reached the journal, whatever became of
	// the record on its way to the sink). One stage owns a directory at a time; `draftflow run` keeps it in its
	// output directory. Empty: no journal.
	AnswersDir string
	// Ready, when set, gets the stage's readiness check (Run only): it owns partitions of the tokenized topic
	// and at least one endpoint is up.
	Ready *dfmetrics.Readiness
	// Stall, when set, is kept current by Run: why the stage gets no answers, and how many it got.
	Stall *Stall
}

// withDefaults returns a copy with the stage's zero values replaced by defaults; the Controller applies its
// own (admission.Config.WithDefaults).
func (c Config) withDefaults() Config {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.RevokeTimeout <= 0 {
		c.RevokeTimeout = DefaultRevokeTimeout
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	c.Loops = c.Loops.withDefaults()
	if c.Registerer == nil {
		c.Registerer = prometheus.DefaultRegisterer
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate reports a configuration the stage cannot run with.
func (c Config) validate() error {
	return errors.Join(c.Override.validate(), c.Loops.validate(), c.Config.WithDefaults().Validate())
}

// RegisterFlags binds the stage's settings to flags: --sglang (repeatable), --sglang-file, --policy,
// --sglang-api-key-file, --concurrency, --routing, --max-new-tokens, --lane (repeatable), --request-timeout, --max-timeouts, --group,
// --max-in-flight, --shutdown-grace, --shards-wait, --health-interval, --kv-quantile, --kv-target-usage, --kv-poll-interval,
// --kv-safe-completions, --kv-safe-fraction, --kv-headroom-outputs, --loop-action, --loop-max-period,
// --loop-min-repeats, --loop-min-tokens. Kafka settings and the metrics endpoint
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
	fs.Func("sglang-api-key-file", "file holding the API key of servers started with --api-key",
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
	fs.IntVar(&c.Concurrency, "concurrency", admission.DefaultConcurrency, "in-flight requests per endpoint (policy fixed)")
	fs.StringVar(&c.Routing, "routing", RouteHeadroom, "endpoint choice: headroom or round-robin")
	fs.IntVar(&c.DefaultMaxNewTokens, "max-new-tokens", admission.DefaultMaxNewTokens, "max_new_tokens of records whose settings and lane set none")
	c.Override.registerFlags(fs)
	c.Loops.registerFlags(fs)
	fs.Func("lane", "scheduling lane NAME[,max_new_tokens=N][,share=F][,datasets=A|B] (repeatable)", func(s string) error {
		l, err := ParseLane(s)
		if err != nil {
			return err
		}
		c.Lanes = append(c.Lanes, l)
		return nil
	})
	fs.DurationVar(&c.RequestTimeout, "request-timeout", admission.DefaultRequestTimeout, "limit of one request attempt")
	fs.IntVar(&c.MaxTimeouts, "max-timeouts", admission.DefaultMaxTimeouts, "attempts of one request that may time out before it is dead-lettered")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", DefaultMaxInFlight, "records fetched and not yet finished")
	fs.DurationVar(&c.RevokeTimeout, "revoke-timeout", DefaultRevokeTimeout, "on a rebalance, time running requests of partitions given up may finish before they are aborted and left to the next owner")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", DefaultShutdownGrace, "time in-flight requests may finish after SIGTERM before they are aborted and redelivered (0: abort at once; a second signal always does)")
	fs.DurationVar(&c.ShardsWait, "shards-wait", DefaultShardsWait, "at start, how long to wait for a sink to say what its shards hold (shards topic) when none has yet, so that no turn in the shards is generated again (0: do not wait)")
	fs.StringVar(&c.AnswersDir, "answers-dir", "", "directory journaling every answered generation before it is produced: started again on it, the stage asks no server again for an answer it holds "+
		"(one stage process per directory; draftflow run uses OUT/answers; empty: no journal)")
	fs.DurationVar(&c.HealthInterval, "health-interval", admission.DefaultHealthInterval, "endpoint health check interval")
	fs.DurationVar(&c.UnreachableTimeout, "unreachable-timeout", admission.DefaultUnreachableTimeout, "give up when no --sglang endpoint has answered at all "+
		"(connections refused) for this long since the start (negative: never); a server that answers, even 503 while loading, is waited for")
	fs.Float64Var(&c.Budget.Quantile, "kv-quantile", admission.DefaultQuantile, "quantile of learnt output lengths charged per request (kv-budget)")
	fs.Float64Var(&c.Budget.TargetUsage, "kv-target-usage", admission.DefaultTargetUsage, "KV token usage the budget steers to (kv-budget)")
	fs.DurationVar(&c.Budget.PollInterval, "kv-poll-interval", admission.DefaultPollInterval, "server load polling interval (kv-budget)")
	fs.Float64Var(&c.Budget.SafeCompletions, "kv-safe-completions", admission.DefaultSafeCompletions,
		"running requests expected to finish before the pool fills, for another request to go (kv-budget; higher: fewer retractions, emptier pool)")
	fs.Float64Var(&c.Budget.SafeFraction, "kv-safe-fraction", admission.DefaultSafeFraction,
		"cap on --kv-safe-completions as a fraction of the requests in flight on an endpoint (kv-budget; negative: none)")
	fs.Float64Var(&c.Budget.HeadroomOutputs, "kv-headroom-outputs", admission.DefaultHeadroomOutputs,
		"mean output lengths of KV kept free once the pool is half full (kv-budget)")
}

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
