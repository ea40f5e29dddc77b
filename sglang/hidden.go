package sglang

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"unsafe"
)

// What sglang 0.5.23 returns for a request with "return_hidden_states": true (read from the wheel and checked
// on the live CPU server; docs/hidden-states.md has the measurements):
//
//   - meta_info.hidden_states is a list of chunks in position order: each prefill chunk the request ran is a
//     2-D list [positions][width] (batch_result_processor.py _append_prefill_hidden_states: one chunk per
//     chunked-prefill step, a single one for a prompt under --chunked-prefill-size), each decode step a 1-D
//     list [width] (_append_decode_hidden_states). max_new_tokens 0 returns [] (no forward pass reports
//     states); max_new_tokens 1 returns the prompt's positions only: the prefill chunk(s), and the sampled
//     token's state is never computed.
//   - Positions the radix cache already held are not recomputed and so not returned: the first chunk starts
//     at meta_info.cached_tokens. A capture server runs with --disable-radix-cache (and CaptureHidden checks
//     that every position came back).
//   - Width: the hidden size on a plain server (--enable-return-hidden-states: the final-norm output, what
//     lm_head reads); with --enable-return-aux-hidden-states --speculative-algorithm EAGLE3 the concatenation
//     of the captured layers' inputs (k x hidden, layers in the order the model lists them) in place of it:
//     one server answers one of the two, never both.
//   - Numbers: the tensor's .tolist() serialised by orjson: the shortest decimal that round-trips the
//     float64 of each element (fp32 values: ~17 significant digits, ~20 bytes with the comma; bf16 values:
//     their exact, shorter decimals), exponents as "1e-05" style.

// HiddenStates is the hidden-state block of one /generate answer: Rows positions of Width float32 each,
// row-major in Data (Rows*Width values).
type HiddenStates struct {
	// Rows is the number of positions (prefill positions first, then one per decode step).
	Rows int
	// Width is the number of values per position (hidden size, or k x hidden for aux capture).
	Width int
	// Data holds the values, position after position.
	Data []float32
}

// Row returns position i's values (a view into Data).
func (h *HiddenStates) Row(i int) []float32 { return h.Data[i*h.Width : (i+1)*h.Width] }

// maxHiddenResponseBytes bounds a /generate answer carrying hidden states. A value takes ~11 bytes from a bf16
// server and ~20 from an fp32 one, so 1 GiB holds ~4,500 (bf16) or ~2,500 (fp32) positions at Kimi-K2's aux
// width (3 x 7168): longer rows at that width need the binary path docs/hidden-states.md describes.
const maxHiddenResponseBytes = 1 << 30

// CaptureHidden sends a prefill of ids (max_new_tokens 1, temperature 0, return_hidden_states true) and returns
// the hidden states of every position of ids, as the server was started to report them (see HiddenStates).
// The sampled token's state is not part of the answer. An answer that does not hold exactly len(ids)
// positions (a radix-cache hit on a server without --disable-radix-cache, a server without hidden-state
// return) is an *InvalidResponseError saying which.
func (c *Client) CaptureHidden(ctx context.Context, rid string, ids []uint32) (*HiddenStates, *GenerateResponse, error) {
	zero := 0.0
	req := &GenerateRequest{InputIDs: ids, RID: rid, ReturnHiddenStates: true,
		SamplingParams: SamplingParams{MaxNewTokens: 1, Temperature: &zero}}
	body, err := jsonMarshal(req)
	if err != nil {
		return nil, nil, err
	}
	data, err := c.doLimit(ctx, http.MethodPost, "/generate", body, maxHiddenResponseBytes)
	if err != nil {
		return nil, nil, err
	}
	hs, resp, err := ParseGenerateHidden(data)
	if err != nil {
		var ir *InvalidResponseError
		if errors.As(err, &ir) {
			return nil, nil, &InvalidResponseError{Reason: c.base + "/generate: " + ir.Reason}
		}
		return nil, nil, err
	}
	if hs.Rows != len(ids) {
		return nil, nil, &InvalidResponseError{Reason: fmt.Sprintf(
			"%s/generate: rid %s: hidden states for %d of %d positions (cached_tokens %d: a capture server needs --disable-radix-cache)",
			c.base, rid, hs.Rows, len(ids), resp.MetaInfo.CachedTokens)}
	}
	return hs, resp, nil
}

// ParseGenerateHidden splits a /generate answer into its hidden states (meta_info.hidden_states, parsed into
// float32 without building a generic tree) and the rest of the answer (parsed and checked as Generate does).
// An answer without meta_info.hidden_states, or with one of another shape, is an *InvalidResponseError.
func ParseGenerateHidden(data []byte) (*HiddenStates, *GenerateResponse, error) {
	hs := &HiddenStates{}
	start, end, err := findHiddenStates(data, hs)
	if err != nil {
		return nil, nil, &InvalidResponseError{Reason: "meta_info.hidden_states: " + err.Error()}
	}
	// The rest of the answer without the (large) array: a copy with null in its place.
	rest := make([]byte, 0, len(data)-(end-start)+4)
	rest = append(append(append(rest, data[:start]...), "null"...), data[end:]...)
	resp, err := parseGenerateResponse(rest)
	if err != nil {
		return nil, nil, err
	}
	return hs, resp, nil
}

// ParseHiddenStates parses the value of meta_info.hidden_states: a list whose elements are either one
// position ([width] numbers) or several ([[width] numbers, ...]). Every position must have the same width;
// numbers must be JSON numbers within float32's range. The empty list gives zero rows.
func ParseHiddenStates(data []byte) (*HiddenStates, error) {
	p := hsParser{b: data}
	h := &HiddenStates{}
	if err := p.list(h); err != nil {
		return nil, err
	}
	return h, p.end()
}

// list parses the hidden-state list starting at p.i into h, leaving p.i after it.
func (p *hsParser) list(h *HiddenStates) error {
	p.ws()
	if !p.eat('[') {
		return p.errf("want a list")
	}
	p.ws()
	if p.eat(']') {
		return nil
	}
	for {
		p.ws()
		if !p.eat('[') {
			return p.errf("want a list of positions or a position")
		}
		p.ws()
		if p.peek() == '[' { // a chunk of positions
			for {
				p.ws()
				if !p.eat('[') {
					return p.errf("want a position")
				}
				if err := p.row(h); err != nil {
					return err
				}
				p.ws()
				if p.eat(',') {
					continue
				}
				if p.eat(']') {
					break
				}
				return p.errf("want ',' or ']' after a position")
			}
		} else if err := p.row(h); err != nil { // one position
			return err
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if p.eat(']') {
			break
		}
		return p.errf("want ',' or ']' after a chunk")
	}
	return nil
}

// hsParser scans the hidden-state array.
type hsParser struct {
	b []byte
	i int
}

func (p *hsParser) errf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *hsParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *hsParser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *hsParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *hsParser) end() error {
	p.ws()
	if p.i != len(p.b) {
		return p.errf("unexpected data after the list")
	}
	return nil
}

// row parses one position's numbers after its '[' up to and including its ']' and appends them to h.
func (p *hsParser) row(h *HiddenStates) error {
	n := 0
	p.ws()
	if !p.eat(']') {
		for {
			p.ws()
			v, err := p.number()
			if err != nil {
				return err
			}
			h.Data = append(h.Data, v)
			n++
			p.ws()
			if p.eat(',') {
				continue
			}
			if p.eat(']') {
				break
			}
			return p.errf("want ',' or ']' after a number")
		}
	}
	if n == 0 {
		return p.errf("empty position")
	}
	if h.Rows == 0 {
		h.Width = n
	} else if n != h.Width {
		return p.errf("position %d has %d values, the first had %d", h.Rows, n, h.Width)
	}
	h.Rows++
	return nil
}

// pow10 holds the powers of ten a float64 represents exactly (Clinger's fast path).
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
	1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// number parses one JSON number into float32 (through float64: exact for the shortest decimals of float32
// values that SGLang writes). Short decimals take Clinger's fast path (mantissa below 2^53, power of ten
// at most 22: one exact multiply or divide); the others strconv.ParseFloat.
func (p *hsParser) number() (float32, error) {
	start := p.i
	b := p.b
	i := p.i
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	var mant uint64
	digits := 0 // significant digits in mant (leading zeros not counted)
	exp := 0
	intStart := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if mant != 0 || b[i] != '0' {
			digits++
		}
		if digits <= 19 {
			mant = mant*10 + uint64(b[i]-'0')
		} else {
			exp++
		}
		i++
	}
	if i == intStart {
		p.i = i
		return 0, p.errf("want a number")
	}
	if b[intStart] == '0' && i-intStart > 1 {
		p.i = intStart
		return 0, p.errf("leading zero in a number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		fracStart := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if mant != 0 || b[i] != '0' {
				digits++
			}
			if digits <= 19 {
				mant = mant*10 + uint64(b[i]-'0')
				exp--
			}
			i++
		}
		if i == fracStart {
			p.i = i
			return 0, p.errf("want digits after '.'")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		es := i
		e := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if e < 10000 {
				e = e*10 + int(b[i]-'0')
			}
			i++
		}
		if i == es {
			p.i = i
			return 0, p.errf("want digits in an exponent")
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	p.i = i
	var f float64
	if digits <= 19 && mant < 1<<53 && exp >= -22 && exp <= 22 {
		f = float64(mant)
		if exp < 0 {
			f /= pow10[-exp]
		} else {
			f *= pow10[exp]
		}
		if neg {
			f = -f
		}
	} else {
		s := unsafe.String(&b[start], i-start)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("at byte %d: number %q: %w", start, s, err)
		}
		f = v
	}
	v := float32(f)
	if math.IsInf(float64(v), 0) {
		return 0, fmt.Errorf("at byte %d: number %q out of float32 range", start, b[start:i])
	}
	return v, nil
}

// findHiddenStates parses the value of meta_info.hidden_states of a /generate answer into h and returns its
// byte span, walking the top-level object and meta_info without decoding the other values.
func findHiddenStates(data []byte, h *HiddenStates) (int, int, error) {
	p := &jsonWalker{b: data}
	start, end := -1, -1
	err := p.object(func(key []byte) error {
		if string(key) != "meta_info" {
			return p.skip()
		}
		return p.object(func(k []byte) error {
			if string(k) == "hidden_states" {
				if start >= 0 {
					return p.errf("hidden_states twice")
				}
				p.ws()
				start = p.i
				// Parsed in place: the array is most of the answer, so it is scanned once.
				hp := hsParser{b: data, i: p.i}
				if err := hp.list(h); err != nil {
					return err
				}
				p.i, end = hp.i, hp.i
				return nil
			}
			return p.skip()
		})
	})
	if err != nil {
		return 0, 0, err
	}
	p.ws()
	if p.i != len(data) {
		return 0, 0, fmt.Errorf("at byte %d: unexpected data after the answer", p.i)
	}
	if start < 0 {
		return 0, 0, errors.New("absent (a server without hidden-state return, or a request without return_hidden_states)")
	}
	return start, end, nil
}

// jsonWalker walks JSON objects by key and skips values without decoding them.
type jsonWalker struct {
	b []byte
	i int
}

func (p *jsonWalker) errf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *jsonWalker) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// object walks an object, calling member with each key; member must consume the value.
func (p *jsonWalker) object(member func(key []byte) error) error {
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return p.errf("want an object")
	}
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return nil
	}
	for {
		p.ws()
		ks := p.i
		if err := p.str(); err != nil {
			return err
		}
		key := p.b[ks+1 : p.i-1]
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return p.errf("want ':'")
		}
		p.i++
		if err := member(key); err != nil {
			return err
		}
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return nil
		}
		return p.errf("want ',' or '}'")
	}
}

// str consumes a string.
func (p *jsonWalker) str() error {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return p.errf("want a string")
	}
	p.i++
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return nil
		case c == '\\':
			p.i += 2
		case c < 0x20:
			return p.errf("control character in a string")
		default:
			p.i++
		}
	}
	return p.errf("unterminated string")
}

// skip consumes one value of any kind, checking its syntax only as far as finding its end needs (the
// values this walker skips are decoded afterwards by encoding/json or ParseHiddenStates).
func (p *jsonWalker) skip() error {
	p.ws()
	if p.i >= len(p.b) {
		return p.errf("want a value")
	}
	switch c := p.b[p.i]; c {
	case '"':
		return p.str()
	case '{', '[':
		depth := 0
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case '"':
				if err := p.str(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth < 0 {
					return p.errf("unbalanced brackets")
				}
				if depth == 0 {
					p.i++
					return nil
				}
			}
			p.i++
		}
		return p.errf("unterminated value")
	default:
		s := p.i
		for p.i < len(p.b) && !bytes.ContainsRune([]byte(",}] \t\n\r"), rune(p.b[p.i])) {
			p.i++
		}
		if p.i == s {
			return p.errf("want a value")
		}
		return nil
	}
}
