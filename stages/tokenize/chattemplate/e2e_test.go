package chattemplate

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/draftflow/draftflow/stages/tokenize/tokenizer"
)

// TestEndToEndIDsMatchTransformers checks the whole tokenize path on real models: the ids of
// tokenizer.Encode(template.Render(...)) must equal apply_chat_template(..., tokenize=True).
func TestEndToEndIDsMatchTransformers(t *testing.T) {
	corpus := loadCorpus(t)
	for _, model := range conformanceModels {
		t.Run(model, func(t *testing.T) {
			dir := modelDir(t, model)
			tmpl, err := Load(dir)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
			if err != nil {
				t.Skipf("tokenizer package cannot load %s yet (not a chat template problem): %v", model, err)
			}
			cases := casesFor(model, corpus)
			refs := reference(t, refRequest{Mode: "chat", ModelDir: dir, Tokenize: true, Cases: cases})
			for _, c := range cases {
				ref := refs[c.ID]
				if ref.Error != "" {
					continue // covered by TestModelTemplatesMatchTransformers
				}
				t.Run(c.ID, func(t *testing.T) {
					text, err := tmpl.Render(conversation{refCase: c}.input(t))
					if err != nil {
						t.Fatalf("Render: %v", err)
					}
					got := tok.Encode(text)
					if !slices.Equal(got, ref.IDs) {
						i := 0
						for i < len(got) && i < len(ref.IDs) && got[i] == ref.IDs[i] {
							i++
						}
						t.Fatalf("ids differ at index %d (want %d ids, got %d)\n  want: %v\n  got:  %v",
							i, len(ref.IDs), len(got), ref.IDs[i:min(len(ref.IDs), i+12)], got[i:min(len(got), i+12)])
					}
				})
			}
		})
	}
}
