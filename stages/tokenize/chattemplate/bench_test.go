package chattemplate

import (
	"testing"

	"github.com/draftflow/draftflow/internal/testassets"
)

// BenchmarkRender renders the multi-turn conversation of the corpus with each real template.
func BenchmarkRender(b *testing.B) {
	corpus := loadCorpus(b)
	var conv conversation
	for _, c := range corpus {
		if c.ID == "multi_turn" {
			conv = c
		}
	}
	for _, model := range conformanceModels {
		b.Run(model, func(b *testing.B) {
			tmpl, err := Load(testassets.Tokenizer(b, model))
			if err != nil {
				b.Fatal(err)
			}
			in := conv.input(b)
			out, err := tmpl.Render(in)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.Render(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
