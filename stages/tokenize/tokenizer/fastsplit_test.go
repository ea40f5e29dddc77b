package tokenizer

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// knownPatternNames lists the fast-path patterns with a readable name, in a stable order.
func knownPatternNames() []string {
	names := make([]string, 0, len(fastMatchers))
	for p := range fastMatchers {
		names = append(names, p)
	}
	sort.Strings(names)
	return names
}

// regexpReference compiles the general-path matcher for a known pattern.
func regexpReference(t testing.TB, pattern string) matcher {
	t.Helper()
	m, err := compileRegex(pattern)
	if err != nil {
		t.Fatalf("compile %q: %v", pattern, err)
	}
	return m
}

func checkMatchers(t *testing.T, pattern, s string, ref matcher) {
	t.Helper()
	got := fastMatcher{fastMatchers[pattern]}.findAll(s, nil)
	want := ref.findAll(s, nil)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pattern %.40q on %q:\nfast   %v\nregexp %v", pattern, s, spans(s, got), spans(s, want))
	}
}

func spans(s string, ms [][2]int) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = fmt.Sprintf("%q", s[m[0]:m[1]])
	}
	return out
}

// TestFastMatchersAgainstRegexp checks every hand-written matcher against the general regex path
// on the corpus and on seeded random strings.
func TestFastMatchersAgainstRegexp(t *testing.T) {
	t.Parallel()
	ensureUnicode()
	texts := append(corpusTexts(t), randomTexts(7, 3000)...)
	for _, p := range knownPatternNames() {
		ref := regexpReference(t, p)
		for _, s := range texts {
			checkMatchers(t, p, s, ref)
		}
	}
}

// FuzzFastMatchers is the native fuzz target for the same property.
func FuzzFastMatchers(f *testing.F) {
	for _, s := range []string{"foo   123", "I'm  here\n\n x", "ǅungla'S  \u00a0\t", "你好😀\u200d👍🏽", "a\u0301b'LL/\r\n"} {
		f.Add(s)
	}
	ensureUnicode()
	refs := map[string]matcher{}
	for _, p := range knownPatternNames() {
		refs[p] = regexpReference(f, p)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utfValid(s) {
			return
		}
		for _, p := range knownPatternNames() {
			checkMatchers(t, p, s, refs[p])
		}
	})
}

func utfValid(s string) bool { return strings.ToValidUTF8(s, "") == s }

// TestRegexpPathAgainstReference loads real tokenizers with the fast matchers disabled and checks
// the general regex path on the corpus too.
func TestRegexpPathAgainstReference(t *testing.T) {
	for _, name := range []string{"llama3_1", "deepseek_v3", "gptoss"} {
		t.Run(name, func(t *testing.T) {
			path := fetchTokenizer(t, name)
			tk, err := builder{regexpOnly: true}.load(path)
			if err != nil {
				t.Fatal(err)
			}
			texts := corpusTexts(t)
			want := golden(t, path, texts)
			for i, text := range texts {
				compareIDs(t, fmt.Sprintf("%s (regexp path) text %d", name, i), text, tk.Encode(text), want.IDs[i])
			}
		})
	}
}
