package sglang

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/draftflow/draftflow/secret"
)

// liveHidden reads a /generate answer recorded from sglang 0.5.23 on the CPU (an 8-layer hidden-256 Qwen3
// model; generate_hidden_aux*.json served with --enable-return-aux-hidden-states --speculative-algorithm
// EAGLE3, so width 3 x 256) and decodes its hidden states with encoding/json as the reference.
func liveHidden(t testing.TB, name string) ([]byte, [][]float64) {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		MetaInfo struct {
			HiddenStates []json.RawMessage `json:"hidden_states"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	var rows [][]float64
	for _, chunk := range ref.MetaInfo.HiddenStates {
		var two [][]float64
		if err := json.Unmarshal(chunk, &two); err == nil {
			rows = append(rows, two...)
			continue
		}
		var one []float64
		if err := json.Unmarshal(chunk, &one); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, one)
	}
	return data, rows
}

func TestParseGenerateHiddenLive(t *testing.T) {
	for name, want := range map[string]struct{ rows, width, cached, outputs int }{
		// A prefill of 7 uncached prompt tokens, max_new_tokens 1: one [7][768] chunk (TestFeaturesMatchTransformers
		// in internal/livesglang checks the live server still answers with these fields and this shape).
		"generate_hidden_aux.json": {7, 768, 0, 1},
		// The same from a server started with --enable-return-hidden-states: the final-norm output, [7][256].
		"generate_hidden_final.json": {7, 256, 0, 1},
		// A 5-token prompt of which the radix cache held 4, max_new_tokens 2 (a server without
		// --disable-radix-cache): a [1][768] prefill chunk for the one recomputed position, then a [768]
		// decode step.
		"generate_hidden_aux_cached_decode.json": {2, 768, 4, 2},
	} {
		data, ref := liveHidden(t, name)
		hs, resp, err := ParseGenerateHidden(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if hs.Rows != want.rows || hs.Width != want.width || len(ref) != want.rows || resp.MetaInfo.CachedTokens != want.cached ||
			len(resp.OutputIDs) != want.outputs {
			t.Fatalf("%s: %d x %d, cached %d, outputs %d", name, hs.Rows, hs.Width, resp.MetaInfo.CachedTokens, len(resp.OutputIDs))
		}
		for i := range ref {
			for j, v := range ref[i] {
				if got := hs.Row(i)[j]; got != float32(v) {
					t.Fatalf("%s [%d][%d]: %v, want %v", name, i, j, got, float32(v))
				}
			}
		}
	}
}

func TestParseHiddenStatesForms(t *testing.T) {
	hs, err := ParseHiddenStates([]byte(` [ [[1, -2.5e-3],[0.00001,1e+22]], [ -0.0 , 3E2 ] ] `))
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{1, -2.5e-3, 1e-5, 1e22, 0, 300}
	if hs.Rows != 3 || hs.Width != 2 || len(hs.Data) != 6 {
		t.Fatalf("%+v", hs)
	}
	for i, v := range want {
		if hs.Data[i] != v {
			t.Fatalf("value %d: %v, want %v", i, hs.Data[i], v)
		}
	}
	if !math.Signbit(float64(hs.Data[4])) {
		t.Fatal("-0.0 lost its sign")
	}
	if hs, err := ParseHiddenStates([]byte(`[]`)); err != nil || hs.Rows != 0 {
		t.Fatalf("empty: %+v %v", hs, err)
	}
	for _, bad := range []string{``, `[`, `[[]]`, `[[1,2],[3]]`, `[[1,2],[[3]]]`, `[[[1,2]],[1]]`, `[1]`, `[[1,]]`,
		`[[01]]`, `[[1.]]`, `[[.5]]`, `[[1e]]`, `[[1e400]]`, `[[3.5e38]]`, `[["1"]]`, `[[1]]x`, `[[NaN]]`, `[[1 2]]`,
		`{"a":1}`, `[[-]]`, `[[1e+]]`} {
		if _, err := ParseHiddenStates([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseGenerateHiddenErrors(t *testing.T) {
	for _, bad := range []string{
		`{"output_ids":[1],"meta_info":{"finish_reason":{"type":"length"}}}`,                             // no hidden_states
		`{"output_ids":[1],"meta_info":{"finish_reason":{"type":"length"},"hidden_states":[[1],[2,3]]}}`, // ragged
		`{"output_ids":[1],"meta_info":{"hidden_states":[[1]],"finish_reason":{"type":"length"}}`,        // cut
		`{"output_ids":[1],"meta_info":{"hidden_states":[[1]]}}`,                                         // no finish_reason
		`[{"meta_info":{"hidden_states":[]}}]`,
	} {
		_, _, err := ParseGenerateHidden([]byte(bad))
		var ir *InvalidResponseError
		if !errors.As(err, &ir) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	hs, resp, err := ParseGenerateHidden([]byte(`{"text":"a\"}]","output_ids":[7],"meta_info":{"id":"x","e":{"k":[1,{"z":"]"}]},` +
		`"hidden_states":[[[0.5,1]]],"finish_reason":{"type":"length","length":1},"cached_tokens":0}}`))
	if err != nil || hs.Rows != 1 || hs.Data[1] != 1 || resp.Text != `a"}]` || resp.OutputIDs[0] != 7 {
		t.Fatalf("%+v %+v %v", hs, resp, err)
	}
}

func TestCaptureHidden(t *testing.T) {
	data, _ := os.ReadFile("testdata/generate_hidden_aux.json")
	cached, _ := os.ReadFile("testdata/generate_hidden_aux_cached_decode.json")
	var got GenerateRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&got)
		if len(got.InputIDs) == 7 {
			w.Write(data)
		} else {
			w.Write(cached)
		}
	}))
	defer srv.Close()
	c := NewClient(srv.URL, srv.Client(), secret.Value{})
	hs, _, err := c.CaptureHidden(context.Background(), "r1", []uint32{11, 12, 13, 14, 15, 16, 17})
	if err != nil || hs.Rows != 7 {
		t.Fatalf("%v %v", hs, err)
	}
	if !got.ReturnHiddenStates || got.SamplingParams.MaxNewTokens != 1 || *got.SamplingParams.Temperature != 0 || got.RID != "r1" {
		t.Fatalf("request %+v", got)
	}
	_, _, err = c.CaptureHidden(context.Background(), "r2", []uint32{1, 2, 3, 4, 5})
	if err == nil || !strings.Contains(err.Error(), "2 of 5 positions") || !strings.Contains(err.Error(), "disable-radix-cache") {
		t.Fatalf("short capture: %v", err)
	}
}

func FuzzParseHiddenStates(f *testing.F) {
	data, _ := os.ReadFile("testdata/generate_hidden_aux_cached_decode.json")
	f.Add(data)
	for _, s := range []string{`[]`, `[[[1,2]],[3,4]]`, `[[1e-7,-0.0]]`, `[[1.5e+22]]`, `{"meta_info":{"hidden_states":[]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if hs, err := ParseHiddenStates(b); err == nil {
			if len(hs.Data) != hs.Rows*hs.Width {
				t.Fatalf("%d values for %d x %d", len(hs.Data), hs.Rows, hs.Width)
			}
			// What parses must be valid JSON with the same numbers.
			var ref []any
			if json.Unmarshal(b, &ref) != nil {
				t.Fatalf("accepted invalid JSON %q", b)
			}
		}
		if hs, resp, err := ParseGenerateHidden(b); err == nil && (resp == nil || len(hs.Data) != hs.Rows*hs.Width) {
			t.Fatal("inconsistent result")
		}
	})
}

// kimiAnswer builds a /generate answer holding rows positions of width floats, formatted as SGLang's orjson
// writes a tensor's .tolist(): the shortest decimal of each value's float64. bf16 says whether the server's
// tensors are bf16 (a GPU server: short exact decimals) or fp32.
func kimiAnswer(rows, width int, bf16 bool) []byte {
	rng := rand.New(rand.NewPCG(7, 7))
	b := []byte(`{"text":"","output_ids":[1],"meta_info":{"id":"x","finish_reason":{"type":"length","length":1},` +
		`"prompt_tokens":` + strconv.Itoa(rows) + `,"completion_tokens":1,"cached_tokens":0,"hidden_states":[[`)
	for r := 0; r < rows; r++ {
		if r > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for i := 0; i < width; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			f := float32(rng.NormFloat64())
			if bf16 {
				u := math.Float32bits(f)
				u += 0x7fff + (u>>16)&1
				f = math.Float32frombits(u &^ 0xffff)
			}
			b = strconv.AppendFloat(b, float64(f), 'f', -1, 64)
		}
		b = append(b, ']')
	}
	return append(b, `]]}}`...)
}

// BenchmarkParseHiddenKimi parses a /generate answer of 64 positions at Kimi-K2's width (hidden 7168; 3 aux
// layers + the final state = 4 x 7168 values a token, as the two captures together return them) and reports
// wire bytes and parse CPU per token. Values N(0,1): bf16 ones take ~11 bytes each as orjson writes them
// (measured: 10.9 at sigma 1, 14.2 at sigma 0.1), fp32 ones ~20.
func BenchmarkParseHiddenKimi(b *testing.B) {
	const rows, width = 64, 4 * 7168
	for _, c := range []struct {
		name string
		bf16 bool
	}{{"bf16", true}, {"fp32", false}} {
		data := kimiAnswer(rows, width, c.bf16)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			cpu0 := cpuSeconds()
			for b.Loop() {
				hs, _, err := ParseGenerateHidden(data)
				if err != nil || hs.Rows != rows {
					b.Fatal(err)
				}
			}
			// CPU time, not wall time: the machines this runs on are shared.
			b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N)/rows, "cpu-s/token")
			b.ReportMetric(float64(len(data))/rows, "wire-B/token")
		})
	}
}

// cpuSeconds is the process's user+system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
