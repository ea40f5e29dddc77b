package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A minimal JSON scanner for the large parts of tokenizer.json (the vocabulary and the merges,
// hundreds of thousands of entries): decoding them through encoding/json's reflection takes
// seconds, this takes a fraction of that. Everything small is still decoded by encoding/json.

type jsonScanner struct {
	b []byte
	i int
}

var errJSON = errors.New("tokenizer: malformed JSON")

func (s *jsonScanner) errorf(what string) error {
	return fmt.Errorf("%w: %s at byte %d", errJSON, what, s.i)
}

func (s *jsonScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// expect consumes c after optional whitespace.
func (s *jsonScanner) expect(c byte) error {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != c {
		return s.errorf(fmt.Sprintf("expected %q", c))
	}
	s.i++
	return nil
}

// peek returns the next non-space byte (0 at end).
func (s *jsonScanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// str decodes a JSON string.
func (s *jsonScanner) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			v := string(s.b[start:s.i])
			s.i++
			if !utf8.ValidString(v) {
				return toValidLikeJSON(v), nil
			}
			return v, nil
		}
		if c == '\\' {
			return s.strSlow(start)
		}
		if c < 0x20 {
			return "", s.errorf("control character in string")
		}
		s.i++
	}
	return "", s.errorf("unterminated string")
}

func toValidLikeJSON(v string) string {
	var out []rune
	for _, r := range v {
		out = append(out, r) // invalid bytes decode as U+FFFD, as encoding/json does
	}
	return string(out)
}

func (s *jsonScanner) strSlow(start int) (string, error) {
	buf := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return toValidLikeJSON(string(buf)), nil
		case c < 0x20:
			return "", s.errorf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return "", s.errorf("unterminated escape")
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", s.errorf("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					save := s.i
					s.i += 2
					if v, ok := s.hex4(); ok {
						r2 = v
					} else {
						s.i = save
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						buf = utf8.AppendRune(buf, dec)
						continue
					}
					s.i = save
				}
				r = utf8.RuneError
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", s.errorf("bad escape")
		}
	}
	return "", s.errorf("unterminated string")
}

func (s *jsonScanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

// uint32 decodes a non-negative integer.
func (s *jsonScanner) uint32() (uint32, error) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	v, err := strconv.ParseUint(string(s.b[start:s.i]), 10, 32)
	if err != nil {
		return 0, s.errorf("expected a token id")
	}
	return uint32(v), nil
}

// skip consumes one JSON value of any kind and returns its raw bytes.
func (s *jsonScanner) skip() (json.RawMessage, error) {
	s.ws()
	start := s.i
	depth := 0
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			if _, err := s.str(); err != nil {
				return nil, err
			}
			if depth == 0 {
				return s.b[start:s.i], nil
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return nil, s.errorf("unbalanced brackets")
			}
			if depth == 0 {
				s.i++
				return s.b[start:s.i], nil
			}
		case ',', ':', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return nil, s.errorf("expected a value")
			}
		default:
			if depth == 0 {
				for s.i < len(s.b) && !isDelim(s.b[s.i]) {
					s.i++
				}
				if s.i == start {
					return nil, s.errorf("expected a value")
				}
				return s.b[start:s.i], nil
			}
		}
		s.i++
	}
	return nil, s.errorf("unexpected end")
}

func isDelim(c byte) bool {
	switch c {
	case ',', ']', '}', ':', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// object calls field for each key of an object; field must consume the value.
func (s *jsonScanner) object(field func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.errorf("expected , or }")
		}
	}
}

// array calls elem for each element of an array; elem must consume the value.
func (s *jsonScanner) array(elem func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.errorf("expected , or ]")
		}
	}
}

// parseTokenizerJSON splits a tokenizer.json into its sections, decoding the model's vocab and
// merges with the scanner and every other value with encoding/json.
func parseTokenizerJSON(data []byte) (*jsonTokenizer, *jsonModel, error) {
	s := &jsonScanner{b: data}
	j := &jsonTokenizer{}
	jm := &jsonModel{}
	sections := map[string]*json.RawMessage{
		"truncation": &j.Truncation, "padding": &j.Padding, "normalizer": &j.Normalizer,
		"pre_tokenizer": &j.PreTokenizer, "post_processor": &j.PostProcessor, "decoder": &j.Decoder,
	}
	var added json.RawMessage
	err := s.object(func(key string) error {
		switch key {
		case "model":
			return parseModelJSON(s, jm)
		case "added_tokens":
			raw, err := s.skip()
			added = raw
			return err
		}
		raw, err := s.skip()
		if dst, ok := sections[key]; ok {
			*dst = raw
		}
		return err
	})
	if err == nil && s.peek() != 0 {
		err = s.errorf("trailing data")
	}
	if err != nil {
		return nil, nil, err
	}
	if len(added) > 0 {
		if err := json.Unmarshal(added, &j.AddedTokens); err != nil {
			return nil, nil, fmt.Errorf("tokenizer: added_tokens: %w", err)
		}
	}
	return j, jm, nil
}

func parseModelJSON(s *jsonScanner, jm *jsonModel) error {
	small := map[string]json.RawMessage{}
	err := s.object(func(key string) error {
		switch key {
		case "vocab":
			if s.peek() != '{' {
				_, err := s.skip() // another model's vocab format: the model type check reports it
				return err
			}
			jm.Vocab = make(map[string]uint32, len(s.b)/200)
			return s.object(func(tok string) error {
				id, err := s.uint32()
				jm.Vocab[tok] = id
				return err
			})
		case "merges":
			if s.peek() != '[' {
				return s.errorf("merges must be an array")
			}
			jm.MergePairs = make([][2]string, 0, len(s.b)/100)
			return s.array(func() error {
				if s.peek() == '"' {
					m, err := s.str()
					if err != nil {
						return err
					}
					a, b, ok := cutMerge(m)
					if !ok {
						return fmt.Errorf("tokenizer: merge %d %q is not two space-separated tokens", len(jm.MergePairs), m)
					}
					jm.MergePairs = append(jm.MergePairs, [2]string{a, b})
					return nil
				}
				var pair [2]string
				n := 0
				err := s.array(func() error {
					v, err := s.str()
					if n < 2 {
						pair[n] = v
					}
					n++
					return err
				})
				if err == nil && n != 2 {
					err = fmt.Errorf("tokenizer: merge %d is not a pair of tokens", len(jm.MergePairs))
				}
				jm.MergePairs = append(jm.MergePairs, pair)
				return err
			})
		}
		raw, err := s.skip()
		small[key] = raw
		return err
	})
	if err != nil {
		return err
	}
	rest, _ := json.Marshal(small)
	if err := json.Unmarshal(rest, jm); err != nil {
		return fmt.Errorf("tokenizer: parse model: %w", err)
	}
	return nil
}
