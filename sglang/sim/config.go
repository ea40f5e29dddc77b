package sim

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Defaults applied by Config when a field holds its zero value.
const (
	DefaultMaxTotalTokens           = 159277 // reference run: 8 GPUs, bf16 KV
	DefaultContextLength            = 262144
	DefaultChunkedPrefillSize       = 8192
	DefaultMaxPrefillTokens         = 16384
	DefaultScheduleConservativeness = 1.0
	DefaultTimeScale                = 1.0
	DefaultVocabSize                = 151936
	DefaultSpecialTokenStart        = 151643
	DefaultMaxNewTokens             = 128
	DefaultOutputLenMean            = 3000
	DefaultOutputLenSigma           = 0.8
	DefaultDecodeLogInterval        = 40
	DefaultStreamInterval           = 1
	DefaultLoopPeriod               = 32
	DefaultCrashDowntime            = 2 * time.Minute
	DefaultModelPath                = "draftflow/sim"
	DefaultDPSize                   = 1
)

// Releases of SGLang whose HTTP API the server imitates (Config.Release).
const (
	// Release0523 is SGLang 0.5.23, the default: /server_info with resolved
	// server args, startup_time and per-rank internal_states; /v1/loads;
	// /ready; meta_info.num_retractions; api-key exemptions for /health*,
	// /ready* and /metrics*.
	Release0523 = "0.5.23"
	// Release054 is SGLang 0.5.4, the last plain 0.5.x release before
	// /v1/loads (0.5.8) and the per-request retraction count in meta_info
	// (total_retractions, first shipped in 0.5.4.post3). It serves
	// /get_server_info (no /server_info, /model_info or /ready), the legacy
	// /get_load, meta_info without a retraction count or dp_rank, and no
	// sglang:num_retracted_requests_total series.
	Release054 = "0.5.4"
	// DefaultRelease is the release a zero Config imitates.
	DefaultRelease = Release0523
)

// defaultEOSTokenIDs are the end-of-sequence ids used when Config.EOSTokenIDs
// is empty (Qwen-family <|im_end|> and <|endoftext|>).
var defaultEOSTokenIDs = []int{151645, 151643}

// Output-length distributions accepted by Config.OutputLenDistribution.
const (
	DistLognormal   = "lognormal"
	DistExponential = "exponential"
	DistUniform     = "uniform"
	DistFixed       = "fixed"
)

// Config describes one simulated SGLang server. It is a plain struct: every
// zero value stands for the documented default, so Config{} is a server shaped
// like the reference run (a 159,277-token KV pool running in real time).
type Config struct {
	// ModelPath is reported by /get_server_info and /get_model_info and used
	// as the model_name label of the metrics. Default "draftflow/sim".
	ModelPath string

	// MaxTotalTokens is the KV pool size in tokens (SGLang
	// max_total_num_tokens). Default 159277.
	MaxTotalTokens int
	// MaxRunningRequests caps the running batch of each DP rank
	// (--max-running-requests). Default as SGLang 0.5.23 derives it
	// (mem_cache/kv_cache_configurator.py resolve_max_num_reqs):
	// min(clamp(MaxTotalTokens/ContextLength*512, 2048, 4096), MaxTotalTokens/2).
	// A value set here is still capped at MaxTotalTokens/2, as SGLang caps it.
	MaxRunningRequests int
	// ContextLength is the model context length (--context-length). Inputs of
	// this many tokens or more, and input+max_new_tokens at or above it, are
	// rejected with HTTP 400. Default 262144.
	ContextLength int
	// DPSize is the number of data-parallel ranks (--dp-size). Each rank is
	// its own scheduler with its own KV pool of MaxTotalTokens tokens (SGLang's
	// max_total_num_tokens is per rank), running batch, waiting queue and
	// prefix cache; requests are dispatched round robin (0.5.23's default
	// load_balance_method) unless they name a rank with routed_dp_rank.
	// Default 1.
	DPSize int

	// APIKey, when set, makes every route but /health*, /ready* and
	// /metrics* (0.5.4: /health* and /metrics*) answer HTTP 401
	// {"error":"Unauthorized"} unless the request carries
	// "Authorization: Bearer <APIKey>" (--api-key; SGLang utils/auth.py).
	APIKey string
	// Release is the SGLang release whose HTTP API the server imitates
	// (--release): Release0523 (default) or Release054.
	Release string
	// ChunkedPrefillSize is the most prompt tokens one prefill batch computes
	// (--chunked-prefill-size). Default 8192; negative disables chunking.
	ChunkedPrefillSize int
	// MaxPrefillTokens caps the tokens of one prefill batch
	// (--max-prefill-tokens). Default 16384.
	MaxPrefillTokens int
	// ScheduleConservativeness scales the initial new_token_ratio
	// (--schedule-conservativeness). Default 1.0.
	ScheduleConservativeness float64
	// MaxQueuedRequests rejects requests with 503 "The request queue is
	// full." once this many are waiting (--max-queued-requests). 0 = no limit.
	MaxQueuedRequests int
	// DisableRadixCache turns the prefix cache off (--disable-radix-cache):
	// cached_tokens is then always 0 and finished requests free their KV.
	DisableRadixCache bool
	// DecodeLogInterval is how many decode steps pass between refreshes of
	// the decode-side Prometheus gauges (--decode-log-interval). Default 40.
	DecodeLogInterval int
	// StreamInterval is how many decode steps pass between streamed chunks
	// (--stream-interval). Default 1.
	StreamInterval int

	// TimeScale is simulated seconds per wall-clock second: 1 runs in real
	// time, 1000 runs an hour of generation in 3.6 s. Default 1.
	TimeScale float64
	// Instant runs the engine without sleeping at all: simulated time only
	// advances by the modelled step durations, as fast as the CPU allows.
	// TimeScale is then ignored. Meant for throughput tests of the pipeline.
	Instant bool
	// Timing holds the step-duration model; zero fields take the calibrated
	// defaults documented on TimeModel.
	Timing TimeModel

	// VocabSize bounds every emitted token id to [0, VocabSize). Default 151936.
	VocabSize int
	// EOSTokenIDs end a request with finish_reason stop. Default
	// [151645, 151643].
	EOSTokenIDs []int
	// SpecialTokenStart marks ids in [SpecialTokenStart, VocabSize) as special:
	// they are never emitted as ordinary output. Default 151643 when VocabSize
	// is left at its default, otherwise 0 (no special range).
	SpecialTokenStart int
	// DefaultMaxNewTokens applies when a request leaves max_new_tokens unset.
	// Default 128, as in SGLang.
	DefaultMaxNewTokens int

	// OutputLenDistribution is the natural output length distribution:
	// "lognormal" (default), "exponential", "uniform" (on [1, 2*mean-1]) or
	// "fixed". The natural length ends with an EOS token unless
	// max_new_tokens clips it first (finish_reason length).
	OutputLenDistribution string
	// OutputLenMean is the mean natural output length in tokens. Default 3000.
	OutputLenMean float64
	// OutputLenSigma is the lognormal shape (sigma of the log). Default 0.8.
	OutputLenSigma float64

	// ReasoningTokenIDs, when it holds two ids [start, end], makes every
	// output open with a reasoning segment start ... end covering
	// ReasoningFraction of its natural length.
	ReasoningTokenIDs []int
	// ReasoningFraction is the share of the output spent reasoning. Default
	// 0.5 when ReasoningTokenIDs is set.
	ReasoningFraction float64
	// ToolCallTokenIDs, when it holds two ids [start, end], makes a
	// ToolCallRate share of outputs end with a tool call start ... end just
	// before the EOS token.
	ToolCallTokenIDs []int
	// ToolCallRate is the share of outputs that end with a tool call.
	ToolCallRate float64
	// LoopRate is the share of drawn (not scripted) outputs that fall into a
	// repetition loop, as a reasoning model's replies sometimes do: at a point
	// drawn uniformly within the output's natural length, the output starts
	// repeating its next LoopPeriod tokens, exactly, and never emits EOS, so
	// it runs to max_new_tokens. Decided by its own generator from the
	// request's seed: the outputs that do not loop are those of LoopRate 0.
	LoopRate float64
	// LoopPeriod is the length, in tokens, of the unit a looping output
	// repeats. Default 32.
	LoopPeriod int

	// Conversations is a JSONL dataset in the ingest format (--conversations):
	// rows {"id", "messages"|"conversations": [{"role"|"from",
	// "content"|"value", "reasoning_content"?, "tool_calls"?}], "tools"?},
	// ShareGPT from values included. With ReplyFormat, a request whose rid is
	// the generate stage's "<escaped id>#<turn>.<attempt>;" for a row and
	// assistant turn found here is answered with that original assistant
	// message, written as the model family writes it (see doc.go, "Scripted
	// replies"). Rows without an "id" cannot be matched and are skipped (the
	// count is logged). Loaded once by New; not read without ReplyFormat.
	Conversations string
	// ReplyFormat is how scripted replies are written (--reply-format):
	// ReplyQwen3, ReplyKimiK2, ReplyLlama3 or ReplyDeepSeekV3. Empty turns
	// scripting off: every output is drawn at random.
	ReplyFormat string
	// ToolDivergenceRate is the share of scripted turns with tool calls
	// whose first call diverges from the original (one argument value
	// changed, or a key added), decided by Diverges from (Seed, id, turn),
	// never the attempt (--tool-divergence-rate).
	ToolDivergenceRate float64

	// HiddenStates makes the server a capture server of one of SGLang's two modes (see hidden.go): HiddenAux
	// (--enable-return-aux-hidden-states --speculative-algorithm EAGLE3: AuxLayers x HiddenSize values a
	// position) or HiddenFinal (--enable-return-hidden-states: HiddenSize values a position). A request with
	// return_hidden_states then gets meta_info.hidden_states; empty: such a request is refused (HTTP 400), as
	// SGLang refuses it without either flag.
	HiddenStates string
	// HiddenSize is the simulated model's hidden size. Default 64.
	HiddenSize int
	// AuxLayers are the decoder layers the aux mode captures (only their count and order matter to the
	// values: HiddenValue's layer argument is the index in this list). Default [2, 4, 5] (an 8-layer model).
	AuxLayers []int

	// Seed makes output and fault injection reproducible. Two servers with
	// the same Seed answer the same rid identically.
	Seed int64

	// Faults configures deterministic fault injection.
	Faults Faults

	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
}

// Faults configures fault injection. Every decision is a pure function of
// Seed, the request's rid (or arrival number when it has none) and how many
// times that rid was seen before, so a retried request draws afresh while
// runs stay reproducible.
type Faults struct {
	// ErrorRate is the share of /generate calls answered with HTTP 500.
	ErrorRate float64
	// QueueFullRate is the share of /generate calls answered with HTTP 503
	// "The request queue is full.", on top of MaxQueuedRequests.
	QueueFullRate float64
	// ResetRate is the share of /generate calls whose connection is reset
	// after the engine finished the work, so the response is lost.
	ResetRate float64
	// AddedLatency is wall-clock delay added before a /generate call is
	// handed to the engine.
	AddedLatency time.Duration
	// AddedLatencyRate is the share of calls that get AddedLatency; 0 means
	// all of them.
	AddedLatencyRate float64
	// CrashEvery crashes the server after every CrashEvery of simulated
	// uptime (the first crash at CrashEvery, each next one CrashEvery after
	// the restart): every request in flight loses its connection, the KV
	// pool and prefix cache are wiped, /health answers 503 and new calls are
	// reset for CrashDowntime, and the restarted server reports a new
	// startup_time. 0 disables crashes.
	CrashEvery time.Duration
	// CrashDowntime is how long (simulated) a crash keeps the server down.
	// Default 2 minutes. In Instant mode the server comes back on the next
	// engine iteration.
	CrashDowntime time.Duration
}

// withDefaults returns a copy of c with every zero value replaced by its
// default and derived values filled in.
func (c Config) withDefaults() Config {
	if c.LoopPeriod <= 0 {
		c.LoopPeriod = DefaultLoopPeriod
	}
	if c.HiddenSize <= 0 {
		c.HiddenSize = DefaultHiddenSize
	}
	if len(c.AuxLayers) == 0 {
		c.AuxLayers = []int{2, 4, 5}
	}
	if c.ModelPath == "" {
		c.ModelPath = DefaultModelPath
	}
	if c.MaxTotalTokens <= 0 {
		c.MaxTotalTokens = DefaultMaxTotalTokens
	}
	if c.ContextLength <= 0 {
		c.ContextLength = DefaultContextLength
	}
	c.MaxRunningRequests = resolveMaxRunningRequests(c.MaxRunningRequests, c.MaxTotalTokens, c.ContextLength)
	if c.DPSize <= 0 {
		c.DPSize = DefaultDPSize
	}
	if c.Release == "" {
		c.Release = DefaultRelease
	}
	if c.ChunkedPrefillSize == 0 {
		c.ChunkedPrefillSize = DefaultChunkedPrefillSize
	}
	if c.MaxPrefillTokens <= 0 {
		c.MaxPrefillTokens = DefaultMaxPrefillTokens
	}
	if c.ScheduleConservativeness <= 0 {
		c.ScheduleConservativeness = DefaultScheduleConservativeness
	}
	if c.DecodeLogInterval <= 0 {
		c.DecodeLogInterval = DefaultDecodeLogInterval
	}
	if c.StreamInterval <= 0 {
		c.StreamInterval = DefaultStreamInterval
	}
	if c.TimeScale <= 0 {
		c.TimeScale = DefaultTimeScale
	}
	c.Timing = c.Timing.withDefaults()
	if c.VocabSize <= 0 {
		c.VocabSize = DefaultVocabSize
		if c.SpecialTokenStart == 0 {
			c.SpecialTokenStart = DefaultSpecialTokenStart
		}
	}
	if len(c.EOSTokenIDs) == 0 {
		c.EOSTokenIDs = append([]int(nil), defaultEOSTokenIDs...)
	}
	if c.DefaultMaxNewTokens <= 0 {
		c.DefaultMaxNewTokens = DefaultMaxNewTokens
	}
	if c.OutputLenDistribution == "" {
		c.OutputLenDistribution = DistLognormal
	}
	if c.OutputLenMean <= 0 {
		c.OutputLenMean = DefaultOutputLenMean
	}
	if c.OutputLenSigma <= 0 {
		c.OutputLenSigma = DefaultOutputLenSigma
	}
	if len(c.ReasoningTokenIDs) == 2 && c.ReasoningFraction <= 0 {
		c.ReasoningFraction = 0.5
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Faults.CrashDowntime <= 0 {
		c.Faults.CrashDowntime = DefaultCrashDowntime
	}
	return c
}

// resolveMaxRunningRequests is SGLang 0.5.23's per-rank running-batch limit
// (mem_cache/kv_cache_configurator.py KVCacheConfigurator.resolve_max_num_reqs,
// plain DP so no attention-DP division): a requested value is capped at half
// the pool; without one the estimate pool/context*512, clamped to
// [2048, 4096], is capped at half the pool.
func resolveMaxRunningRequests(requested, pool, contextLen int) int {
	var n int
	if requested > 0 {
		n = min(requested, pool/2)
	} else {
		est := int(float64(pool) / float64(contextLen) * 512)
		n = min(max(min(est, 4096), 2048), pool/2)
	}
	return max(n, 1)
}

// validate reports a configuration that cannot run. c must have defaults applied.
func (c Config) validate() error {
	var errs []error
	if c.HiddenStates != "" && c.HiddenStates != HiddenAux && c.HiddenStates != HiddenFinal {
		errs = append(errs, fmt.Errorf("sim: hidden-state mode %q: want %q or %q", c.HiddenStates, HiddenAux, HiddenFinal))
	}
	for _, id := range c.EOSTokenIDs {
		if id < 0 || id >= c.VocabSize {
			errs = append(errs, fmt.Errorf("sim: EOS token id %d outside vocabulary [0,%d)", id, c.VocabSize))
		}
	}
	for name, ids := range map[string][]int{"ReasoningTokenIDs": c.ReasoningTokenIDs, "ToolCallTokenIDs": c.ToolCallTokenIDs} {
		if len(ids) != 0 && len(ids) != 2 {
			errs = append(errs, fmt.Errorf("sim: %s needs exactly two ids (start, end), got %d", name, len(ids)))
		}
		for _, id := range ids {
			if id < 0 || id >= c.VocabSize {
				errs = append(errs, fmt.Errorf("sim: %s id %d outside vocabulary [0,%d)", name, id, c.VocabSize))
			}
		}
	}
	if c.SpecialTokenStart < 0 || c.SpecialTokenStart > c.VocabSize {
		errs = append(errs, fmt.Errorf("sim: SpecialTokenStart %d outside [0,%d]", c.SpecialTokenStart, c.VocabSize))
	}
	switch c.OutputLenDistribution {
	case DistLognormal, DistExponential, DistUniform, DistFixed:
	default:
		errs = append(errs, fmt.Errorf("sim: unknown output length distribution %q", c.OutputLenDistribution))
	}
	for name, r := range map[string]float64{
		"ErrorRate": c.Faults.ErrorRate, "QueueFullRate": c.Faults.QueueFullRate,
		"ResetRate": c.Faults.ResetRate, "AddedLatencyRate": c.Faults.AddedLatencyRate,
		"ToolCallRate": c.ToolCallRate, "ReasoningFraction": c.ReasoningFraction,
		"ToolDivergenceRate": c.ToolDivergenceRate, "LoopRate": c.LoopRate,
	} {
		if r < 0 || r > 1 {
			errs = append(errs, fmt.Errorf("sim: %s %v outside [0,1]", name, r))
		}
	}
	switch c.ReplyFormat {
	case "": // no scripting; Conversations, if set, is not read
	case ReplyQwen3, ReplyKimiK2, ReplyLlama3, ReplyDeepSeekV3:
		if c.Conversations == "" {
			errs = append(errs, fmt.Errorf("sim: ReplyFormat %q needs Conversations", c.ReplyFormat))
		}
		// Scripted replies are byte tokens (id = byte value): they must be
		// ordinary ids of the vocabulary.
		if c.VocabSize < 256 || (c.SpecialTokenStart > 0 && c.SpecialTokenStart < 256) {
			errs = append(errs, fmt.Errorf("sim: ReplyFormat needs ids 0-255 ordinary (VocabSize %d, SpecialTokenStart %d)", c.VocabSize, c.SpecialTokenStart))
		}
	default:
		errs = append(errs, fmt.Errorf("sim: unknown reply format %q (want %s, %s, %s or %s)", c.ReplyFormat,
			ReplyQwen3, ReplyKimiK2, ReplyLlama3, ReplyDeepSeekV3))
	}
	if c.MaxTotalTokens < 2 {
		errs = append(errs, errors.New("sim: MaxTotalTokens must be at least 2"))
	}
	switch c.Release {
	case Release0523, Release054:
	default:
		errs = append(errs, fmt.Errorf("sim: unknown release %q (want %s or %s)", c.Release, Release0523, Release054))
	}
	if c.DPSize > 1024 {
		errs = append(errs, fmt.Errorf("sim: DPSize %d is more ranks than the simulator supports (1024)", c.DPSize))
	}
	return errors.Join(errs...)
}

// RegisterFlags binds every Config field to a command-line flag named like
// SGLang's server argument where one exists (--max-total-tokens,
// --max-running-requests, --chunked-prefill-size, ...). Values already in c
// are the flags' defaults, so call it on a Config holding what the caller
// wants shown as defaults (usually Config{}).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ModelPath, "model-path", c.ModelPath, "model name reported by the server (default "+DefaultModelPath+")")
	fs.IntVar(&c.MaxTotalTokens, "max-total-tokens", c.MaxTotalTokens, "KV pool size in tokens (0 = 159277)")
	fs.IntVar(&c.MaxRunningRequests, "max-running-requests", c.MaxRunningRequests, "most requests decoding at once (0 = min(pool/2, 4096))")
	fs.IntVar(&c.ContextLength, "context-length", c.ContextLength, "model context length (0 = 262144)")
	fs.IntVar(&c.DPSize, "dp-size", c.DPSize, "data-parallel ranks, each with its own KV pool of max-total-tokens (0 = 1)")
	fs.StringVar(&c.APIKey, "api-key", c.APIKey, "require \"Authorization: Bearer KEY\" on every route but /health*, /ready*, /metrics*")
	fs.StringVar(&c.Release, "release", c.Release, "SGLang release whose HTTP API to imitate: "+Release0523+" (default) or "+Release054)
	fs.IntVar(&c.ChunkedPrefillSize, "chunked-prefill-size", c.ChunkedPrefillSize, "prompt tokens per prefill chunk (0 = 8192, -1 = no chunking)")
	fs.IntVar(&c.MaxPrefillTokens, "max-prefill-tokens", c.MaxPrefillTokens, "prompt tokens per prefill batch (0 = 16384)")
	fs.Float64Var(&c.ScheduleConservativeness, "schedule-conservativeness", c.ScheduleConservativeness, "scales the initial new_token_ratio (0 = 1.0)")
	fs.IntVar(&c.MaxQueuedRequests, "max-queued-requests", c.MaxQueuedRequests, "reject with 503 beyond this many waiting requests (0 = unlimited)")
	fs.BoolVar(&c.DisableRadixCache, "disable-radix-cache", c.DisableRadixCache, "turn the prefix cache off")
	fs.StringVar(&c.HiddenStates, "hidden-states", c.HiddenStates, "answer return_hidden_states as a capture server: "+HiddenAux+
		" (--enable-return-aux-hidden-states --speculative-algorithm EAGLE3) or "+HiddenFinal+" (--enable-return-hidden-states); empty: refuse them")
	fs.IntVar(&c.HiddenSize, "hidden-size", c.HiddenSize, "the simulated model's hidden size for --hidden-states (0 = 64)")
	fs.IntVar(&c.DecodeLogInterval, "decode-log-interval", c.DecodeLogInterval, "decode steps between metric refreshes (0 = 40)")
	fs.IntVar(&c.StreamInterval, "stream-interval", c.StreamInterval, "decode steps between streamed chunks (0 = 1)")
	fs.Float64Var(&c.TimeScale, "time-scale", c.TimeScale, "simulated seconds per wall second (0 = 1)")
	fs.BoolVar(&c.Instant, "instant", c.Instant, "never sleep: run the engine as fast as the CPU allows")
	c.Timing.registerFlags(fs)
	fs.IntVar(&c.VocabSize, "vocab-size", c.VocabSize, "vocabulary size; emitted ids lie in [0, vocab-size) (0 = 151936)")
	fs.Var((*intList)(&c.EOSTokenIDs), "eos-token-ids", "comma-separated EOS token ids (default 151645,151643)")
	fs.IntVar(&c.SpecialTokenStart, "special-token-start", c.SpecialTokenStart, "ids from here to vocab-size are special and never emitted mid-output")
	fs.IntVar(&c.DefaultMaxNewTokens, "default-max-new-tokens", c.DefaultMaxNewTokens, "max_new_tokens when a request sets none (0 = 128)")
	fs.StringVar(&c.OutputLenDistribution, "output-len-dist", c.OutputLenDistribution, "natural output length distribution: lognormal, exponential, uniform, fixed")
	fs.Float64Var(&c.OutputLenMean, "output-len-mean", c.OutputLenMean, "mean natural output length in tokens (0 = 3000)")
	fs.Float64Var(&c.OutputLenSigma, "output-len-sigma", c.OutputLenSigma, "lognormal sigma of the output length (0 = 0.8)")
	fs.Var((*intList)(&c.ReasoningTokenIDs), "reasoning-token-ids", "start,end ids of a reasoning segment opening every output")
	fs.Float64Var(&c.ReasoningFraction, "reasoning-fraction", c.ReasoningFraction, "share of the output spent reasoning (0 = 0.5)")
	fs.Var((*intList)(&c.ToolCallTokenIDs), "tool-call-token-ids", "start,end ids of a tool call closing some outputs")
	fs.Float64Var(&c.ToolCallRate, "tool-call-rate", c.ToolCallRate, "share of outputs ending with a tool call")
	fs.Float64Var(&c.LoopRate, "loop-rate", c.LoopRate, "share of outputs that fall into a repetition loop and run to max_new_tokens")
	fs.IntVar(&c.LoopPeriod, "loop-period", c.LoopPeriod, "tokens a looping output repeats (0 = 32)")
	fs.StringVar(&c.Conversations, "conversations", c.Conversations, "JSONL dataset (ingest format) whose assistant turns answer requests with the generate stage's rids (needs --reply-format)")
	fs.StringVar(&c.ReplyFormat, "reply-format", c.ReplyFormat, "write scripted replies as this model family does: "+ReplyQwen3+", "+ReplyKimiK2+", "+ReplyLlama3+" or "+ReplyDeepSeekV3)
	fs.Float64Var(&c.ToolDivergenceRate, "tool-divergence-rate", c.ToolDivergenceRate, "share of scripted turns with tool calls whose call diverges from the original")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed for outputs and fault injection")
	fs.Float64Var(&c.Faults.ErrorRate, "error-rate", c.Faults.ErrorRate, "share of /generate calls answered 500")
	fs.Float64Var(&c.Faults.QueueFullRate, "queue-full-rate", c.Faults.QueueFullRate, "share of /generate calls answered 503 queue full")
	fs.Float64Var(&c.Faults.ResetRate, "reset-rate", c.Faults.ResetRate, "share of /generate calls whose connection is reset after the work is done")
	fs.DurationVar(&c.Faults.AddedLatency, "added-latency", c.Faults.AddedLatency, "wall-clock delay added to /generate calls")
	fs.Float64Var(&c.Faults.AddedLatencyRate, "added-latency-rate", c.Faults.AddedLatencyRate, "share of calls delayed by added-latency (0 = all)")
	fs.DurationVar(&c.Faults.CrashEvery, "crash-every", c.Faults.CrashEvery, "crash the server every this much simulated time (0 = never)")
	fs.DurationVar(&c.Faults.CrashDowntime, "crash-downtime", c.Faults.CrashDowntime, "simulated time a crash keeps the server down (0 = 2m)")
}

// intList is a flag.Value holding comma-separated integers.
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, v := range *l {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	var out []int
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		v, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("not an integer: %q", p)
		}
		out = append(out, v)
	}
	*l = out
	return nil
}
