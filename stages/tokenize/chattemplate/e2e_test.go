package chattemplate

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/draftflow/draftflow/internal/testassets"
	"github.com/draftflow/draftflow/stages/tokenize/tokenizer"
)

// TestEndToEndIDsMatchTransformers checks the whole tokenize path on real models: the ids of
// tokenizer.Encode(template.Render(...)) must equal apply_chat_template(..., tokenize=True).
//
// One exception is checked rather than assumed: when the pinned transformers itself disagrees with
// tokenizer.json (transformers 5.19 and 5.20 load the deepseek_v3 package, whose config names
// LlamaTokenizerFast, as a slow-style LlamaTokenizer with a Metaspace pre-tokenizer instead of the
// file's ByteLevel one), the ids must equal those of the tokenizers library on tokenizer.json, which
// is what serving stacks feed the model, and the test logs the discrepancy.
func TestEndToEndIDsMatchTransformers(t *testing.T) {
	corpus := loadCorpus(t)
	for _, model := range conformanceModels {
		t.Run(model, func(t *testing.T) {
			dir := testassets.Tokenizer(t, model)
			tmpl, err := Load(dir)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			pinClock(tmpl)
			// The files are there (modelDir fails or skips otherwise), so a load failure is a bug.
			tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
			if err != nil {
				t.Fatalf("tokenizer.Load: %v", err)
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
					if ref.Text != nil && text != *ref.Text {
						t.Fatalf("chat template render differs from transformers: %s", diffExcerpt(*ref.Text, text))
					}
					got := tok.Encode(text)
					want := ref.IDs
					if len(ref.RawIDs) > 0 && !slices.Equal(ref.IDs, ref.RawIDs) {
						t.Logf("pinned transformers' apply_chat_template ids differ from the tokenizers library on tokenizer.json; comparing with the latter")
						want = ref.RawIDs
					}
					if !slices.Equal(got, want) {
						i := 0
						for i < len(got) && i < len(want) && got[i] == want[i] {
							i++
						}
						t.Fatalf("rendered text is identical to transformers', but tokenizer.Encode ids differ at index %d (want %d ids, got %d)\n  want: %v\n  got:  %v",
							i, len(want), len(got), want[i:min(len(want), i+12)], got[i:min(len(got), i+12)])
					}
				})
			}
		})
	}
}
