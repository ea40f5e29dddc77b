package sim

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// outputPlan decides, deterministically, what one request will emit: its
// natural length (where the EOS token goes), the optional reasoning and
// tool-call segments, and the ordinary token ids in between.
type outputPlan struct {
	natural    int   // natural length including the end token
	endToken   int32 // emitted at position natural-1; -1 = none (ignore_eos)
	reasonEnd  int   // position of the reasoning end token; -1 = no segment
	toolStart  int   // position of the tool-call start token; -1 = none
	reasonIDs  []int // [start, end]
	toolIDs    []int // [start, end]
	rng        *rand.Rand
	vocabLimit int            // ordinary ids are drawn from [0, vocabLimit)
	special    map[int32]bool // ids never drawn as ordinary tokens
	// script, when set, is a scripted reply emitted from position 0 (see
	// setScript); scriptReason is the length of its reasoning segment.
	script       []int32
	scriptReason int
	// loopAt, when >= 0, is where the output falls into a repetition loop:
	// from there it repeats the loopUnit tokens it emits first, to the end.
	loopAt   int
	loopUnit []int32
}

// setScript makes the plan emit script first, then the end token (or, when
// min_new_tokens asks for more, ordinary ids up to it, then the end token).
// The random reasoning and tool-call segments are dropped.
func (p *outputPlan) setScript(script []int32, reasonLen, minNew int) {
	p.script, p.scriptReason = script, reasonLen
	p.natural = max(len(script), minNew) + 1
	p.reasonEnd, p.toolStart, p.loopAt = -1, -1, -1
}

// planSeed derives the per-request seed: (server seed, rid, sampling_seed)
// when sampling; (server seed, input ids) when greedy, because a greedy model
// answers the same prompt the same way whatever the rid.
func planSeed(seed int64, rid string, samplingSeed *int64, greedy bool, input []int32) uint64 {
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) {
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	put(uint64(seed))
	if greedy {
		h.Write([]byte("greedy"))
		for _, t := range input {
			put(uint64(t))
		}
	} else {
		h.Write([]byte(rid))
		if samplingSeed != nil {
			h.Write([]byte{1})
			put(uint64(*samplingSeed))
		}
	}
	return h.Sum64()
}

// newOutputPlan draws the plan for one request. minNew raises the natural
// length (SGLang suppresses EOS before min_new_tokens); ignoreEOS removes the
// end token so the request runs to max_new_tokens.
func newOutputPlan(cfg *Config, seed uint64, minNew int, ignoreEOS bool, stopIDs []int) *outputPlan {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := &outputPlan{rng: rng, reasonEnd: -1, toolStart: -1, endToken: -1, loopAt: -1}
	p.natural = drawLength(cfg, rng)
	if p.natural < minNew+1 {
		p.natural = minNew + 1
	}
	p.vocabLimit = cfg.VocabSize
	if cfg.SpecialTokenStart > 0 && cfg.SpecialTokenStart < cfg.VocabSize {
		p.vocabLimit = cfg.SpecialTokenStart
	}
	p.special = map[int32]bool{}
	for _, id := range cfg.EOSTokenIDs {
		p.special[int32(id)] = true
	}
	for _, id := range stopIDs {
		p.special[int32(id)] = true
	}
	for _, id := range cfg.ReasoningTokenIDs {
		p.special[int32(id)] = true
	}
	for _, id := range cfg.ToolCallTokenIDs {
		p.special[int32(id)] = true
	}
	if !ignoreEOS {
		p.endToken = int32(cfg.EOSTokenIDs[rng.IntN(len(cfg.EOSTokenIDs))])
	}
	if len(cfg.ReasoningTokenIDs) == 2 && p.natural >= 3 {
		p.reasonIDs = cfg.ReasoningTokenIDs
		p.reasonEnd = max(1, int(float64(p.natural)*cfg.ReasoningFraction))
		if p.reasonEnd >= p.natural-1 {
			p.reasonEnd = p.natural - 2
		}
	}
	if len(cfg.ToolCallTokenIDs) == 2 && rng.Float64() < cfg.ToolCallRate {
		// A tool call of up to 64 tokens closing the output, after any
		// reasoning segment: start, arguments..., end, then the end token.
		size := 2 + rng.IntN(63)
		start := p.natural - 1 - size
		if start > p.reasonEnd {
			p.toolIDs = cfg.ToolCallTokenIDs
			p.toolStart = start
		}
	}
	if cfg.LoopRate > 0 {
		// Its own generator, so that the outputs that do not loop are those of LoopRate 0.
		lr := rand.New(rand.NewPCG(seed^0x6c6f6f70, seed^0x9e3779b97f4a7c15^0x6c6f6f70))
		if lr.Float64() < cfg.LoopRate {
			p.loopAt = lr.IntN(p.natural)
			p.loopUnit = make([]int32, 0, cfg.LoopPeriod)
			p.endToken, p.toolStart = -1, -1
		}
	}
	return p
}

// drawLength draws a natural output length >= 1.
func drawLength(cfg *Config, rng *rand.Rand) int {
	mean := cfg.OutputLenMean
	var v float64
	switch cfg.OutputLenDistribution {
	case DistFixed:
		v = mean
	case DistUniform:
		v = 1 + rng.Float64()*(2*mean-2)
	case DistExponential:
		v = rng.ExpFloat64() * mean
	default: // lognormal with the requested mean: mu = ln(mean) - sigma^2/2
		s := cfg.OutputLenSigma
		v = math.Exp(math.Log(mean) - s*s/2 + s*rng.NormFloat64())
	}
	n := int(math.Round(v))
	if n < 1 {
		n = 1
	}
	return n
}

// token returns the id at output position i. It must be called for i = 0, 1,
// 2, ... in order (the plan consumes its generator sequentially).
func (p *outputPlan) token(i int) int32 {
	if p.loopAt >= 0 && i >= p.loopAt {
		if k := i - p.loopAt; k >= cap(p.loopUnit) {
			return p.loopUnit[k%cap(p.loopUnit)]
		}
		id := p.draw(i)
		p.loopUnit = append(p.loopUnit, id)
		return id
	}
	return p.draw(i)
}

// draw is the id at output position i of an output without a loop.
func (p *outputPlan) draw(i int) int32 {
	switch {
	case i == p.natural-1 && p.endToken >= 0:
		return p.endToken
	case i < len(p.script):
		return p.script[i]
	case p.reasonEnd >= 0 && i == 0:
		return int32(p.reasonIDs[0])
	case p.reasonEnd >= 0 && i == p.reasonEnd:
		return int32(p.reasonIDs[1])
	case p.toolStart >= 0 && i == p.toolStart:
		return int32(p.toolIDs[0])
	case p.toolStart >= 0 && i == p.natural-2:
		return int32(p.toolIDs[1])
	}
	for {
		id := int32(p.rng.IntN(p.vocabLimit))
		if !p.special[id] {
			return id
		}
	}
}

// reasoningTokens counts the reasoning tokens among the first n outputs
// (start marker through end marker).
func (p *outputPlan) reasoningTokens(n int) int {
	if p.script != nil {
		return min(n, p.scriptReason)
	}
	if p.reasonEnd < 0 || n == 0 {
		return 0
	}
	return min(n, p.reasonEnd+1)
}

// TokenizeText is the simulator's trivial tokenizer for the `text` input
// field: one token per byte, id = byte value.
func TokenizeText(s string) []int32 {
	ids := make([]int32, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = int32(s[i])
	}
	return ids
}

// syllables spell out token ids as pronounceable pseudo-words.
var syllables = [...]string{
	"ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "vu", "we", "xa", "yo", "za", "be", "ci", "do",
}

// DetokenizeIDs renders output ids as the `text` field: ids below 128 are the
// ASCII byte they came from (the inverse of TokenizeText), other ids become a
// space followed by a pseudo-word that spells the id. Special ids (EOS and
// the configured marker ids) are skipped when skipSpecial is set, otherwise
// written as <|id|>.
func DetokenizeIDs(ids []int32, special func(int32) bool, skipSpecial bool) string {
	return detokenize(ids, special, skipSpecial, false)
}

// detokenize is DetokenizeIDs; with byteText (a scripted reply) ids 128-255
// are raw bytes too, so a script's UTF-8 comes back whole.
func detokenize(ids []int32, special func(int32) bool, skipSpecial, byteText bool) string {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case special != nil && special(id):
			if !skipSpecial {
				b.WriteString("<|" + strconv.Itoa(int(id)) + "|>")
			}
		case id >= 0 && (id < 128 || byteText && id < 256):
			b.WriteByte(byte(id))
		default:
			b.WriteByte(' ')
			v := int(id)
			for {
				b.WriteString(syllables[v%len(syllables)])
				v /= len(syllables)
				if v == 0 {
					break
				}
			}
		}
	}
	return b.String()
}
