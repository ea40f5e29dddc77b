package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/sglang"
)

// shapeOf describes a decoded JSON value's shape: its type, and for lists the shape of every element (lists
// of numbers as "[N]number"), for objects their keys' shapes.
func shapeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case string:
		return "string"
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return "float"
		}
		return "int"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = shapeOf(e)
		}
		if len(parts) > 0 && (parts[0] == "float" || parts[0] == "int") {
			for _, p := range parts {
				if p != parts[0] {
					return "[mixed numbers]"
				}
			}
			return fmt.Sprintf("[%d]%s", len(parts), parts[0])
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		b.WriteString("{")
		for _, k := range keys {
			fmt.Fprintf(&b, "%s:%s;", k, shapeOf(x[k]))
		}
		return b.String() + "}"
	}
	return fmt.Sprintf("%T", v)
}

func decodeNumbers(t *testing.T, b []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("%v: %.200s", err, b)
	}
	return m
}

// simOmits are the meta_info keys of sglang 0.5.23's answers (the recorded ones in sglang/testdata) that the
// simulator does not write: timings and storage details no client of ours reads.
var simOmits = []string{"api_server_dispatch_finish_ts", "cached_tokens_details", "decode_throughput", "first_token_latency",
	"forward_entry_time", "prefill_finished_time", "queue_time", "request_finished_ts", "request_received_ts",
	"storage_prefetch_wait", "storage_staging_wait", "weight_versions"}

// TestHiddenStatesContract pins the simulator's return_hidden_states answers to the live server's recorded
// ones (sglang/testdata, sglang 0.5.23 on the CPU with an 8-layer hidden-256 model): the same top-level keys,
// every meta_info key the simulator writes in the recorded answer with the same JSON type, the recorded keys
// it leaves out exactly simOmits, and hidden_states of the same shape (chunks, positions, width, floats),
// for the aux server, the final server and a decode after a prefix-cache hit.
func TestHiddenStatesContract(t *testing.T) {
	cases := []struct {
		file      string
		mode      string
		radix     bool
		maxNew    int
		repeat    bool // send the prompt once first, so the prefix cache holds it
		promptLen int
	}{
		{"generate_hidden_aux.json", HiddenAux, false, 1, false, 7},
		{"generate_hidden_final.json", HiddenFinal, false, 1, false, 7},
		{"generate_hidden_aux_cached_decode.json", HiddenAux, true, 2, true, 5},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			rec, err := os.ReadFile("../testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			want := decodeNumbers(t, rec)
			_, ts := newTestServer(t, Config{Instant: true, HiddenStates: tc.mode, HiddenSize: 256, DisableRadixCache: !tc.radix,
				OutputLenMean: 50, OutputLenDistribution: DistFixed, VocabSize: 1000, SpecialTokenStart: 999, EOSTokenIDs: []int{999}})
			ids := make([]int, tc.promptLen)
			for i := range ids {
				ids[i] = 10 + 7*i
			}
			body := map[string]any{"input_ids": ids, "return_hidden_states": true,
				"sampling_params": map[string]any{"max_new_tokens": tc.maxNew, "temperature": 0}}
			if tc.repeat {
				if resp, b := post(t, ts.URL+"/generate", body); resp.StatusCode != 200 {
					t.Fatalf("first request: %d %s", resp.StatusCode, b)
				}
			}
			resp, b := post(t, ts.URL+"/generate", body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("HTTP %d: %s", resp.StatusCode, b)
			}
			got := decodeNumbers(t, b)
			gk, wk := keys(got), keys(want)
			if !slices.Equal(gk, wk) {
				t.Fatalf("top-level keys %v, recorded %v", gk, wk)
			}
			gm, wm := got["meta_info"].(map[string]any), want["meta_info"].(map[string]any)
			var omitted []string
			for k := range wm {
				if _, ok := gm[k]; !ok {
					omitted = append(omitted, k)
				}
			}
			for k, v := range gm {
				w, ok := wm[k]
				if !ok {
					t.Errorf("meta_info.%s is not in the recorded answer", k)
					continue
				}
				if k == "hidden_states" {
					continue
				}
				// Types, not values (a null dp_rank is null in both; an int stays an int).
				if gs, ws := typeOf(v), typeOf(w); gs != ws {
					t.Errorf("meta_info.%s is %s, recorded %s", k, gs, ws)
				}
			}
			sort.Strings(omitted)
			if !slices.Equal(omitted, recordedOmits(wm)) {
				t.Errorf("meta_info keys left out %v, want %v", omitted, recordedOmits(wm))
			}
			if g, w := shapeOf(gm["hidden_states"]), shapeOf(wm["hidden_states"]); g != w {
				t.Errorf("hidden_states shape %.300s, recorded %.300s", g, w)
			}
			if g, w := shapeOf(got["output_ids"]), shapeOf(want["output_ids"]); g != w {
				t.Errorf("output_ids shape %s, recorded %s", g, w)
			}
			if g, w := gm["cached_tokens"], wm["cached_tokens"]; g.(json.Number) != w.(json.Number) {
				t.Errorf("cached_tokens %v, recorded %v", g, w)
			}
			// The values: HiddenValue of each returned position, as the client parses them.
			hs, gr, err := sglang.ParseGenerateHidden(b)
			if err != nil {
				t.Fatal(err)
			}
			layers := []int{3}
			if tc.mode == HiddenAux {
				layers = []int{0, 1, 2}
			}
			cached := gr.MetaInfo.CachedTokens
			for r := 0; r < hs.Rows; r++ {
				pos := cached + r
				tok := int32(0)
				if pos < len(ids) {
					tok = int32(ids[pos])
				} else {
					tok = int32(gr.OutputIDs[pos-len(ids)])
				}
				row := hs.Row(r)
				for li, l := range layers {
					for c := 0; c < 256; c++ {
						if v, w := row[li*256+c], HiddenValue(tok, pos, l, c); v != w {
							t.Fatalf("position %d layer %d column %d: %v, want %v", pos, l, c, v, w)
						}
					}
				}
			}
		})
	}
}

func recordedOmits(wm map[string]any) []string {
	var out []string
	for _, k := range simOmits {
		if _, ok := wm[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func typeOf(v any) string {
	s := shapeOf(v)
	if strings.HasPrefix(s, "{") {
		return "object"
	}
	return s
}

// TestHiddenStatesRefusedWithoutCaptureMode: a server in no capture mode refuses return_hidden_states with
// SGLang's 400, and a capture server answers plain requests without hidden_states.
func TestHiddenStatesRefusedWithoutCaptureMode(t *testing.T) {
	_, ts := newTestServer(t, Config{Instant: true, OutputLenMean: 5})
	resp, b := post(t, ts.URL+"/generate", map[string]any{"input_ids": []int{1, 2, 3}, "return_hidden_states": true,
		"sampling_params": map[string]any{"max_new_tokens": 1}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "--enable-return-hidden-states") {
		t.Fatalf("HTTP %d %s, want 400 naming --enable-return-hidden-states", resp.StatusCode, b)
	}
	_, ts = newTestServer(t, Config{Instant: true, OutputLenMean: 5, HiddenStates: HiddenFinal})
	resp, b = post(t, ts.URL+"/generate", map[string]any{"input_ids": []int{1, 2, 3}, "sampling_params": map[string]any{"max_new_tokens": 1}})
	if resp.StatusCode != http.StatusOK || strings.Contains(string(b), "hidden_states") {
		t.Fatalf("HTTP %d %s, want 200 without hidden_states", resp.StatusCode, b)
	}
}
