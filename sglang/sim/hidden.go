package sim

import (
	"strconv"
)

// The capture modes of Config.HiddenStates.
const (
	// HiddenAux is a server started with --enable-return-aux-hidden-states --speculative-algorithm EAGLE3: its
	// hidden states are the captured layers' inputs side by side (len(AuxLayers) x HiddenSize a position).
	HiddenAux = "aux"
	// HiddenFinal is a server started with --enable-return-hidden-states: its hidden states are the final
	// norm's output (HiddenSize a position).
	HiddenFinal = "final"
)

// DefaultHiddenSize is Config.HiddenSize's default.
const DefaultHiddenSize = 64

// HiddenValue is the simulated hidden state of token at position pos, in layer layer (0 ... len(AuxLayers)-1:
// the aux layers in order; len(AuxLayers): the final state), column col: a deterministic function of the four,
// a multiple of 1/64 in [-2, 2), so that it is exact in bf16 and a test can check stored features bit for bit.
func HiddenValue(token int32, pos, layer, col int) float32 {
	x := uint64(uint32(token))<<32 ^ uint64(pos)<<12 ^ uint64(layer)<<56 ^ uint64(col)*0x9E3779B97F4A7C15
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return float32(int8(x)) / 64
}

// hiddenStates renders meta_info.hidden_states as SGLang 0.5.23 does for a request of input that produced
// output (batch_result_processor.py): one prefill chunk [positions][width] of the positions the prefix cache
// did not hold (cached tokens are not recomputed, so not returned), split into chunks of ChunkedPrefillSize, then one [width] list per decode step but
// the last (the last sampled token's state is never computed). Numbers are written as orjson writes Python
// floats (a float always has a '.' or an exponent).
func (s *Server) hiddenStates(input, output []int32, cached int) []byte {
	h := s.cfg.HiddenSize
	layers := []int{len(s.cfg.AuxLayers)}
	if s.cfg.HiddenStates == HiddenAux {
		layers = layers[:0]
		for i := range s.cfg.AuxLayers {
			layers = append(layers, i)
		}
	}
	b := make([]byte, 0, (len(input)-cached+len(output))*len(layers)*h*8+16)
	position := func(tok int32, pos int) {
		b = append(b, '[')
		for li, l := range layers {
			for c := 0; c < h; c++ {
				if li > 0 || c > 0 {
					b = append(b, ',')
				}
				b = appendPyFloat(b, HiddenValue(tok, pos, l, c))
			}
		}
		b = append(b, ']')
	}
	chunk := s.cfg.ChunkedPrefillSize
	if chunk <= 0 {
		chunk = len(input) + 1
	}
	b = append(b, '[')
	first := true
	for start := cached; start < len(input); start += chunk {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '[')
		for p := start; p < min(start+chunk, len(input)); p++ {
			if p > start {
				b = append(b, ',')
			}
			position(input[p], p)
		}
		b = append(b, ']')
	}
	for i := 0; i+1 < len(output); i++ {
		if !first {
			b = append(b, ',')
		}
		first = false
		position(output[i], len(input)+i)
	}
	return append(b, ']')
}

// appendPyFloat writes v as Python's float repr (orjson's output for these values): the shortest decimal,
// with ".0" on integral values.
func appendPyFloat(b []byte, v float32) []byte {
	n := len(b)
	b = strconv.AppendFloat(b, float64(v), 'g', -1, 64)
	for _, c := range b[n:] {
		if c == '.' || c == 'e' || c == 'n' || c == 'I' {
			return b
		}
	}
	return append(b, '.', '0')
}
