package tokenizer

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// component is the part of every normalizer / pre-tokenizer / decoder object used to build it.
type component struct {
	Type string `json:"type"`
	// Sequence members (the key differs per component kind).
	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Decoders      []json.RawMessage `json:"decoders"`
	// Split / Replace.
	Pattern  *jsonPattern `json:"pattern"`
	Behavior string       `json:"behavior"`
	Invert   bool         `json:"invert"`
	Content  *string      `json:"content"`
	// Prepend.
	Prepend string `json:"prepend"`
	// ByteLevel; Metaspace in legacy files.
	AddPrefixSpace       bool  `json:"add_prefix_space"`
	LegacyAddPrefixSpace *bool `json:"-"`
	UseRegex             *bool `json:"use_regex"`
	// Digits.
	IndividualDigits bool `json:"individual_digits"`
	// Metaspace.
	Replacement   string `json:"replacement"`
	PrependScheme string `json:"prepend_scheme"`
	Split         *bool  `json:"split"`
	// Strip normalizer / decoder.
	StripLeft  bool `json:"strip_left"`
	StripRight bool `json:"strip_right"`
	Start      int  `json:"start"`
	Stop       int  `json:"stop"`
}

type jsonPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// builder builds a tokenizer's components from their tokenizer.json objects.
type builder struct {
	// regexpOnly compiles every Regex pattern with the general regex engine, even those that have
	// a hand-written matcher (fastMatchers). The constructors leave it false; the conformance tests
	// set it to check the general path against the reference too.
	regexpOnly bool
}

// matcher builds the matcher of a Split or Replace pattern.
func (b builder) matcher(p *jsonPattern) (matcher, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("tokenizer: pattern missing")
	case p.String != nil:
		return literalMatcher{*p.String}, nil
	case p.Regex != nil:
		return b.regex(*p.Regex)
	}
	return nil, fmt.Errorf("tokenizer: pattern has neither String nor Regex")
}

// regex returns the hand-written matcher of a known pattern, or else (or when b.regexpOnly) the
// compiled pattern.
func (b builder) regex(pattern string) (matcher, error) {
	if f, ok := fastMatchers[pattern]; ok && !b.regexpOnly {
		return fastMatcher{f}, nil
	}
	return compileRegex(pattern)
}

func parseComponent(raw json.RawMessage, kind string) (*component, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("tokenizer: parse %s: %w", kind, err)
	}
	var legacy struct {
		AddPrefixSpace *bool `json:"add_prefix_space"`
	}
	if json.Unmarshal(raw, &legacy) == nil {
		c.LegacyAddPrefixSpace = legacy.AddPrefixSpace
	}
	return &c, nil
}

func (b builder) normalizer(raw json.RawMessage) (normalizer, error) {
	c, err := parseComponent(raw, "normalizer")
	if c == nil || err != nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var seq seqNormalizer
		for _, r := range c.Normalizers {
			n, err := b.normalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	case "NFC":
		return newUnicodeNormalizer(norm.NFC), nil
	case "NFD":
		return newUnicodeNormalizer(norm.NFD), nil
	case "NFKC":
		return newUnicodeNormalizer(norm.NFKC), nil
	case "NFKD":
		return newUnicodeNormalizer(norm.NFKD), nil
	case "Prepend":
		return prependNormalizer{c.Prepend}, nil
	case "Replace":
		m, err := b.matcher(c.Pattern)
		if err != nil {
			return nil, err
		}
		if c.Content == nil {
			return nil, fmt.Errorf("tokenizer: Replace normalizer without content")
		}
		return replaceNormalizer{m, *c.Content}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Strip":
		return stripNormalizer{c.StripLeft, c.StripRight}, nil
	case "ByteLevel":
		return byteLevelNormalizer{}, nil
	}
	return nil, errUnsupported("normalizer", c.Type)
}

// preTokenizer builds the pre-tokenizer; byteLevel reports that it ends with ByteLevel (the
// model then works on raw bytes). ByteLevel anywhere but last is unsupported.
func (b builder) preTokenizer(raw json.RawMessage, last bool) (pt preTokenizer, byteLevel bool, err error) {
	c, err := parseComponent(raw, "pre_tokenizer")
	if c == nil || err != nil {
		return nil, false, err
	}
	switch c.Type {
	case "Sequence":
		var seq seqPreTokenizer
		for i, r := range c.PreTokenizers {
			p, bl, err := b.preTokenizer(r, last && i == len(c.PreTokenizers)-1)
			if err != nil {
				return nil, false, err
			}
			if p != nil {
				seq = append(seq, p)
			}
			byteLevel = bl
		}
		if len(seq) == 1 {
			return seq[0], byteLevel, nil
		}
		if len(seq) == 0 {
			return nil, false, nil
		}
		return seq, byteLevel, nil
	case "Split":
		m, err := b.matcher(c.Pattern)
		if err != nil {
			return nil, false, err
		}
		b, ok := map[string]splitBehavior{
			"Removed": behaviorRemoved, "Isolated": behaviorIsolated, "Contiguous": behaviorContiguous,
			"MergedWithPrevious": behaviorMergedWithPrevious, "MergedWithNext": behaviorMergedWithNext,
		}[c.Behavior]
		if !ok {
			return nil, false, errUnsupported("Split behavior", c.Behavior)
		}
		return &splitPreTokenizer{m: m, behavior: b, invert: c.Invert}, false, nil
	case "ByteLevel":
		if !last {
			return nil, false, errUnsupported("pre-tokenizer position", "ByteLevel before other pre-tokenizers")
		}
		bl := &byteLevelPreTokenizer{addPrefixSpace: c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			bl.regex, err = b.matcher(&jsonPattern{Regex: ptr(patGPT2)})
			if err != nil {
				return nil, false, err
			}
		}
		return bl, true, nil
	case "Digits":
		return digitsPreTokenizer{c.IndividualDigits}, false, nil
	case "Metaspace":
		r, n := utf8.DecodeRuneInString(c.Replacement)
		if r == utf8.RuneError || n != len(c.Replacement) {
			return nil, false, fmt.Errorf("tokenizer: Metaspace replacement %q is not one character", c.Replacement)
		}
		ms := &metaspacePreTokenizer{replacement: c.Replacement, prepend: c.PrependScheme, split: c.Split == nil || *c.Split}
		if err := checkMetaspaceLegacy(c); err != nil {
			return nil, false, err
		}
		switch ms.prepend {
		case "":
			ms.prepend = "always"
		case "always", "first", "never":
		default:
			return nil, false, errUnsupported("Metaspace prepend_scheme", ms.prepend)
		}
		return ms, false, nil
	case "WhitespaceSplit":
		return whitespaceSplitPreTokenizer{}, false, nil
	}
	return nil, false, errUnsupported("pre-tokenizer", c.Type)
}

func ptr[T any](v T) *T { return &v }

// checkMetaspaceLegacy applies HF's rule for the legacy add_prefix_space field of Metaspace:
// false is only accepted together with prepend_scheme "never" (the default scheme is "always").
func checkMetaspaceLegacy(c *component) error {
	if c.LegacyAddPrefixSpace != nil && !*c.LegacyAddPrefixSpace && c.PrependScheme != "never" {
		return fmt.Errorf("tokenizer: Metaspace add_prefix_space does not match declared prepend_scheme")
	}
	return nil
}

func buildDecoder(raw json.RawMessage) (decoder, error) {
	c, err := parseComponent(raw, "decoder")
	if c == nil || err != nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var seq seqDecoder
		for _, r := range c.Decoders {
			d, err := buildDecoder(r)
			if err != nil {
				return nil, err
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil || c.Content == nil {
			return nil, errUnsupported("Replace decoder pattern", "Regex")
		}
		return replaceDecoder{*c.Pattern.String, *c.Content}, nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Strip":
		if c.Content == nil || utf8.RuneCountInString(*c.Content) != 1 {
			return nil, fmt.Errorf("tokenizer: Strip decoder content must be one character")
		}
		r, _ := utf8.DecodeRuneInString(*c.Content)
		return stripDecoder{r, c.Start, c.Stop}, nil
	case "Metaspace":
		r, _ := utf8.DecodeRuneInString(c.Replacement)
		if err := checkMetaspaceLegacy(c); err != nil {
			return nil, err
		}
		return metaspaceDecoder{r, c.PrependScheme != "never"}, nil
	}
	return nil, errUnsupported("decoder", c.Type)
}
