package sim

import (
	"encoding/json"
	"testing"
)

// FuzzParseGenerate feeds arbitrary bodies to the /generate parser: it must
// never panic, and whatever it accepts must be within the server's limits.
func FuzzParseGenerate(f *testing.F) {
	for _, seed := range []string{
		`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":5}}`,
		`{"input_ids":[[1],[2,3]],"rid":["a","b"],"sampling_params":[{"max_new_tokens":1},{"ignore_eos":true}]}`,
		`{"text":["ab","c"],"stream":true}`,
		`{"text":"x","input_ids":[1]}`,
		`{"input_ids":[ [1] ],"rid":"a"}`,
		`{"input_ids":[-1]}`,
	} {
		f.Add([]byte(seed))
	}
	s := &Server{cfg: Config{ContextLength: 4096}.withDefaults()}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req GenerateRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		items, batch, err := s.parseGenerate(&req)
		if err == nil {
			s.releaseRIDs(items)
		}
		if err != nil {
			if _, ok := err.(validationError); !ok {
				t.Fatalf("non-validation error %T %v", err, err)
			}
			return
		}
		if len(items) == 0 || (!batch && len(items) != 1) {
			t.Fatalf("accepted %d items (batch %v)", len(items), batch)
		}
		for _, it := range items {
			// SGLang keeps a rid the caller gave, even "" (only a missing
			// rid gets a fresh uuid).
			if len(it.input) == 0 || len(it.input) >= s.cfg.ContextLength || (it.rid == "" && !hasRID(req.RID)) {
				t.Fatalf("accepted item %+v", it)
			}
			for _, id := range it.input {
				if id < 0 || int(id) >= s.cfg.VocabSize {
					t.Fatalf("accepted id %d", id)
				}
			}
		}
	})
}

// hasRID reports whether the request names its rid(s) itself.
func hasRID(raw json.RawMessage) bool {
	t := string(raw)
	return len(raw) > 0 && t != "null"
}
