package chattemplate

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary template sources to the lexer, parser and tree builder. A source is either
// refused with a *SyntaxError or parses (anything else is a bug in the parser), and rendering never
// fails with an internal error (a panic or an expression the evaluator does not know).
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"{{ bos_token }}{% for m in messages %}{{ m.role|upper }}: {{ m.content|trim }}\n{% endfor %}",
		"{%- if tools %}{{ tools|tojson(indent=2) }}{% elif x is not none %}{{ x ~ 'y' }}{% else %}{{ none }}{% endif -%}",
		"{% set ns = namespace(a=1) %}{% for i in [1,2] if i > 1 %}{% set ns.a = ns.a + i %}{% break %}{% endfor %}{{ ns.a }}",
		"{% macro m(a, b='x') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{% raw %}{{ raw }}{% endraw %}",
		"{{ messages[0]['content'][1:-1].split('\\n')|join(', ') }}{# comment #}  {%+ if true %}x{% endif +%}",
		"{% filter upper %}a{% endfilter %}{% set x | lower %}B{% endset %}{{ x }}{{ '%s-%d' % ('a', 1) }}",
	} {
		f.Add(seed)
	}
	in := Input{Messages: []Message{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Parse(src, "<s>", "</s>")
		if err != nil {
			if !errors.As(err, new(*SyntaxError)) {
				t.Fatalf("Parse(%q) failed with a non-syntax error: %v", src, err)
			}
			return
		}
		// Skip sources that could run for long (nested loops, big ranges, repetition).
		if len(src) > 400 || strings.Count(src, "for") > 1 || strings.Contains(src, "range") || strings.Contains(src, "*") {
			return
		}
		if _, err := tmpl.Render(in); err != nil && strings.Contains(err.Error(), "internal error") {
			t.Fatalf("Render of %q: %v", src, err)
		}
	})
}
