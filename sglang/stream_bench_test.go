package sglang

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// streamChunks renders the intermediate chunks of an n-token reply as SGLang 0.5.23 sends them, one a
// decode step: cumulative text (about four bytes a token) and output ids, or deltas.
func streamChunks(n int, deltas bool) [][]byte {
	var text strings.Builder
	var ids []uint32
	out := make([][]byte, 0, n)
	for i := range n {
		id := uint32(1000 + (i*7919)%150000)
		ids = append(ids, id)
		word := " w" + strconv.Itoa(i%100)
		text.WriteString(word)
		chunk := map[string]any{"text": text.String(), "output_ids": ids,
			"meta_info": map[string]any{"id": "r#0.1;", "finish_reason": nil, "prompt_tokens": 2000, "completion_tokens": i + 1,
				"cached_tokens": 0, "weight_version": "default", "e2e_latency": 1.5}}
		if deltas {
			chunk["text"], chunk["output_ids"] = word, ids[i:]
		}
		b, _ := json.Marshal(chunk)
		out = append(out, b)
	}
	return out
}

// BenchmarkStreamChunk measures the client's cost of reading a streamed reply, per token (one chunk a
// token, SGLang's default --stream-interval 1), for a 2,560-token reply (the reference workload's mean) and
// a 10,240-token one (its max_new_tokens): cumulative chunks (SGLang's default) cost more per token the
// longer the reply, deltas (--incremental-streaming-output) the same.
func BenchmarkStreamChunk(b *testing.B) {
	for _, tc := range []struct {
		name   string
		n      int
		deltas bool
	}{{"cumulative-2560", 2560, false}, {"cumulative-10240", 10240, false}, {"deltas-10240", 10240, true}} {
		chunks := streamChunks(tc.n, tc.deltas)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var st *streamState
			for i := 0; i < b.N; i++ {
				k := i % len(chunks)
				if k == 0 {
					st = &streamState{}
				}
				if _, err := st.chunk(chunks[k]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
