package sim

import (
	"flag"
	"time"
)

// TimeModel gives the simulated duration of one forward pass. Zero fields
// take the defaults below, calibrated so that a batch of 35 requests holding
// about 4.2K tokens of KV each decodes at ~600 output tokens/s, the reference
// run's figure (8 GPUs, 159,277-token pool, ~35 running, 600 tok/s):
//
//	decode  = DecodeBase + DecodePerRequest*batch + DecodePerKVToken*kvTokens
//	        = 25 ms + 35 * 0.4 ms + 147K * 0.12 us  ~= 57 ms -> ~615 tok/s
//	prefill = PrefillBase + PrefillPerToken*extendTokens
//	        + PrefillAttention * sum_i extend_i*(prefix_i + extend_i/2)
//	        (8192 fresh tokens ~= 30 ms + 328 ms + 34 ms ~= 0.39 s)
//
// kvTokens counts every KV slot the batch attends to (prompt plus generated
// tokens of each running request); extend_i and prefix_i are the tokens a
// request computes in the prefill batch and the tokens it already has cached.
type TimeModel struct {
	// DecodeBase is the fixed cost of one decode step. Default 25 ms.
	DecodeBase time.Duration
	// DecodePerRequest is the cost per request in a decode batch. Default 0.4 ms.
	DecodePerRequest time.Duration
	// DecodePerKVToken is the attention cost per KV token read in a decode
	// step, in nanoseconds. Default 120 ns.
	DecodePerKVToken time.Duration
	// PrefillBase is the fixed cost of one prefill batch. Default 30 ms.
	PrefillBase time.Duration
	// PrefillPerToken is the cost per computed prompt token. Default 40 us.
	PrefillPerToken time.Duration
	// PrefillAttentionPerKTokenPair is the attention cost per thousand
	// (query token, key token) pairs in a prefill. Default 1 us.
	PrefillAttentionPerKTokenPair time.Duration
}

// Calibrated TimeModel defaults; see TimeModel.
const (
	DefaultDecodeBase                    = 25 * time.Millisecond
	DefaultDecodePerRequest              = 400 * time.Microsecond
	DefaultDecodePerKVToken              = 120 * time.Nanosecond
	DefaultPrefillBase                   = 30 * time.Millisecond
	DefaultPrefillPerToken               = 40 * time.Microsecond
	DefaultPrefillAttentionPerKTokenPair = time.Microsecond
)

func (m TimeModel) withDefaults() TimeModel {
	if m.DecodeBase <= 0 {
		m.DecodeBase = DefaultDecodeBase
	}
	if m.DecodePerRequest <= 0 {
		m.DecodePerRequest = DefaultDecodePerRequest
	}
	if m.DecodePerKVToken <= 0 {
		m.DecodePerKVToken = DefaultDecodePerKVToken
	}
	if m.PrefillBase <= 0 {
		m.PrefillBase = DefaultPrefillBase
	}
	if m.PrefillPerToken <= 0 {
		m.PrefillPerToken = DefaultPrefillPerToken
	}
	if m.PrefillAttentionPerKTokenPair <= 0 {
		m.PrefillAttentionPerKTokenPair = DefaultPrefillAttentionPerKTokenPair
	}
	return m
}

// DecodeSeconds is the simulated duration of a decode step over batch
// requests attending to kvTokens KV slots in total.
func (m TimeModel) DecodeSeconds(batch, kvTokens int) float64 {
	return m.DecodeBase.Seconds() + float64(batch)*m.DecodePerRequest.Seconds() +
		float64(kvTokens)*m.DecodePerKVToken.Seconds()
}

// PrefillSeconds is the simulated duration of a prefill batch computing
// extendTokens new tokens in total, where attnPairs is
// sum_i extend_i*(prefix_i + extend_i/2).
func (m TimeModel) PrefillSeconds(extendTokens int, attnPairs float64) float64 {
	return m.PrefillBase.Seconds() + float64(extendTokens)*m.PrefillPerToken.Seconds() +
		attnPairs/1000*m.PrefillAttentionPerKTokenPair.Seconds()
}

func (m *TimeModel) registerFlags(fs *flag.FlagSet) {
	fs.DurationVar(&m.DecodeBase, "decode-base", m.DecodeBase, "time model: fixed cost of a decode step (0 = 25ms)")
	fs.DurationVar(&m.DecodePerRequest, "decode-per-request", m.DecodePerRequest, "time model: decode cost per request (0 = 400us)")
	fs.DurationVar(&m.DecodePerKVToken, "decode-per-kv-token", m.DecodePerKVToken, "time model: decode cost per KV token read (0 = 120ns)")
	fs.DurationVar(&m.PrefillBase, "prefill-base", m.PrefillBase, "time model: fixed cost of a prefill batch (0 = 30ms)")
	fs.DurationVar(&m.PrefillPerToken, "prefill-per-token", m.PrefillPerToken, "time model: prefill cost per computed token (0 = 40us)")
	fs.DurationVar(&m.PrefillAttentionPerKTokenPair, "prefill-attention", m.PrefillAttentionPerKTokenPair, "time model: prefill attention cost per 1000 token pairs (0 = 1us)")
}
