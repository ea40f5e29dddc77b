package livesglang

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/draftflow/draftflow/secret"
	"github.com/draftflow/draftflow/sglang"
	"github.com/draftflow/draftflow/shard/features"
)

// featureLayers is the model of TestFeaturesMatchTransformers: 8 layers, where SGLang's default EAGLE-3
// capture (Qwen3ForCausalLM.set_eagle3_layers_to_capture: the inputs of layers 2, L/2, L-3) is three
// distinct layers (2, 4, 5).
const featureLayers = 8

// startModelServer starts a server of another model than the tier's, stopped when t ends.
func startModelServer(t *testing.T, name, model string, pool int, args ...string) *server {
	t.Helper()
	out, err := script(append([]string{"up", "--name", name, "--pool", strconv.Itoa(pool), "--model", model, "--"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{name: name, url: lastLine(out), pool: pool, args: args}
	upMu.Lock()
	up[name] = s
	upMu.Unlock()
	t.Cleanup(func() {
		if t.Failed() {
			s.report(t)
		}
		s.down()
	})
	return s
}

// checkRecorded pins the answers recorded in sglang/testdata (which the sglang package's parser tests read)
// to the live server: a prefill of 7 ids with max_new_tokens 1 must have the recorded answer's fields, top
// level and meta_info, and hidden states of one [7][width] chunk. DRAFTFLOW_LIVE_UPDATE=1 records the answer
// again.
func checkRecorded(t *testing.T, url, name string, width int) {
	t.Helper()
	zero := 0.0
	body, _ := json.Marshal(&sglang.GenerateRequest{InputIDs: []uint32{11, 12, 13, 14, 15, 16, 17}, ReturnHiddenStates: true,
		SamplingParams: sglang.SamplingParams{MaxNewTokens: 1, Temperature: &zero}})
	resp, err := http.Post(url+"/generate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	live, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: %d %v %.300s", name, resp.StatusCode, err, live)
	}
	path := filepath.Join(repoRoot, "sglang", "testdata", name)
	if os.Getenv("DRAFTFLOW_LIVE_UPDATE") != "" {
		if err := os.WriteFile(path, live, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recorded, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (DRAFTFLOW_LIVE_UPDATE=1 records it)", err)
	}
	fields := func(data []byte) (top, meta []string, hs [][][]float64) {
		var m map[string]json.RawMessage
		var mi map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil || json.Unmarshal(m["meta_info"], &mi) != nil || json.Unmarshal(mi["hidden_states"], &hs) != nil {
			t.Fatalf("%s: not the answer's shape: %.300s", name, data)
		}
		top, meta = slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(mi))
		return
	}
	lt, lm, lhs := fields(live)
	rt, rm, _ := fields(recorded)
	if !slices.Equal(lt, rt) || !slices.Equal(lm, rm) {
		t.Errorf("%s: live fields %v / meta_info %v, recorded %v / %v (DRAFTFLOW_LIVE_UPDATE=1 records them again)", name, lt, lm, rt, rm)
	}
	if len(lhs) != 1 || len(lhs[0]) != 7 || len(lhs[0][0]) != width {
		t.Errorf("%s: live hidden_states not one [7][%d] chunk", name, width)
	}
	hs, _, err := sglang.ParseGenerateHidden(live)
	if err != nil || hs.Rows != 7 || hs.Width != width {
		t.Errorf("%s: the parser read %v, %v", name, hs, err)
	}
}

// TestFeaturesMatchTransformers captures EAGLE-3 features from the live server as draftflow will: a prefill
// of each row (max_new_tokens 1) on a server started with --enable-return-aux-hidden-states
// --speculative-algorithm EAGLE3 (the three aux layers), then on one started with
// --enable-return-hidden-states (the final-norm output: the aux server returns the aux states in place of
// it, never both), both with --disable-radix-cache (cached positions are not returned). The rows are 12
// conversations of 3 turns whose later rows extend the earlier ones, as a conversation's turns do. The
// features go into a draftflow feature file (bf16); the transformers reference reads it back with the
// Python loader and compares both the fp32 capture and the file with one fp32 forward pass of the same
// weights, layer by layer.
func TestFeaturesMatchTransformers(t *testing.T) {
	need(t)
	out, err := script("model", "--layers", strconv.Itoa(featureLayers))
	if err != nil {
		t.Fatal(err)
	}
	model := lastLine(out)
	rng := rand.New(rand.NewPCG(25, 1))
	type row struct {
		id  string
		ids []uint32
	}
	var rows []row
	for c := 0; c < 12; c++ {
		var ids []uint32
		for turn := 0; turn < 3; turn++ {
			n := 10 + rng.IntN(60)
			for i := 0; i < n; i++ {
				ids = append(ids, uint32(rng.IntN(151643)))
			}
			rows = append(rows, row{id: fmt.Sprintf("c%02d#%d", c, turn), ids: append([]uint32(nil), ids...)})
		}
	}
	capture := func(url string) ([]*sglang.HiddenStates, time.Duration) {
		c := sglang.NewClient(url, &http.Client{Timeout: 5 * time.Minute}, secret.Value{})
		var hs []*sglang.HiddenStates
		t0 := time.Now()
		for _, r := range rows {
			h, _, err := c.CaptureHidden(context.Background(), r.id, r.ids)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		return hs, time.Since(t0)
	}
	common := []string{"--disable-radix-cache", "--context-length", "2048"}
	srv := startModelServer(t, "features-aux", model, 4096,
		append([]string{"--enable-return-aux-hidden-states", "--speculative-algorithm", "EAGLE3"}, common...)...)
	checkRecorded(t, srv.url, "generate_hidden_aux.json", 3*256)
	aux, auxTime := capture(srv.url)
	srv.down() // one server at a time
	srv = startModelServer(t, "features-final", model, 4096, append([]string{"--enable-return-hidden-states"}, common...)...)
	checkRecorded(t, srv.url, "generate_hidden_final.json", 256)
	fin, finTime := capture(srv.url)
	srv.down()

	const hidden = 256
	auxLayers := []int{2, featureLayers / 2, featureLayers - 3}
	names := []string{}
	for _, l := range auxLayers {
		names = append(names, "aux:"+strconv.Itoa(l))
	}
	names = append(names, "final")
	dir := t.TempDir()
	fpath := filepath.Join(dir, "features-000000.dff")
	w, err := features.Create(fpath, features.Header{Hidden: hidden, Layers: names})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.Create(filepath.Join(dir, "fp32.bin"))
	if err != nil {
		t.Fatal(err)
	}
	var reqRows []map[string]any
	tokens := 0
	for i, r := range rows {
		if aux[i].Width != 3*hidden || fin[i].Width != hidden {
			t.Fatalf("row %s: widths %d and %d, want %d and %d", r.id, aux[i].Width, fin[i].Width, 3*hidden, hidden)
		}
		if err := w.AddLayers(r.id, len(r.ids), aux[i].Data, fin[i].Data); err != nil {
			t.Fatal(err)
		}
		if err := binary.Write(raw, binary.LittleEndian, aux[i].Data); err != nil {
			t.Fatal(err)
		}
		if err := binary.Write(raw, binary.LittleEndian, fin[i].Data); err != nil {
			t.Fatal(err)
		}
		reqRows = append(reqRows, map[string]any{"id": r.id, "ids": r.ids})
		tokens += len(r.ids)
	}
	raw.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Layers map[string]struct {
			FP32Abs   float64 `json:"fp32_abs"`
			FP32Rel   float64 `json:"fp32_rel"`
			BF16Abs   float64 `json:"bf16_abs"`
			BF16Rel   float64 `json:"bf16_rel"`
			BF16Bound float64 `json:"bf16_bound"`
			RefAbsMax float64 `json:"ref_absmax"`
		} `json:"layers"`
		Tokens        int            `json:"tokens"`
		V1Bytes       map[string]int `json:"v1_bytes"`
		FeaturesBytes int            `json:"features_bytes"`
	}
	python(t, venvPython, filepath.Join(repoRoot, "internal", "livesglang", "testdata", "features_ref.py"), map[string]any{
		"model_dir": model, "repo": repoRoot, "features": fpath, "fp32": raw.Name(), "aux_layers": auxLayers,
		"rows": reqRows, "v1_dir": filepath.Join(dir, "v1"),
	}, &res)
	if res.Tokens != tokens || len(res.Layers) != len(names) {
		t.Fatalf("reference covered %d tokens and %d layers, want %d and %d", res.Tokens, len(res.Layers), tokens, len(names))
	}
	for _, n := range names {
		s := res.Layers[n]
		t.Logf("%-6s |ref| max %.3g; fp32 capture: max abs %.3g, rel %.3g; bf16 file: max abs %.3g, rel %.3g, bound ratio %.3f",
			n, s.RefAbsMax, s.FP32Abs, s.FP32Rel, s.BF16Abs, s.BF16Rel, s.BF16Bound)
		// The server in fp32 and transformers in fp32 agree to float rounding (1e-4 of the values' scale).
		if s.FP32Abs > 1e-4*math.Max(1, s.RefAbsMax) {
			t.Errorf("%s: fp32 capture differs from transformers by %g (|ref| up to %g)", n, s.FP32Abs, s.RefAbsMax)
		}
		// The file: bf16 rounding (at most 2^-8 of each value) plus 1e-4.
		if s.BF16Bound > 1 {
			t.Errorf("%s: bf16 file outside |ref|/256 + 1e-4 (worst ratio %.3f)", n, s.BF16Bound)
		}
	}
	t.Logf("%d rows, %d tokens: capture %.2fs (aux) + %.2fs (final) on the CPU; feature file %d bytes (%.0f B/token), "+
		"SpecForge v1 .ckpt bf16 %d bytes (%.0f B/token), fp32 %d bytes (%.0f B/token)",
		len(rows), tokens, auxTime.Seconds(), finTime.Seconds(), res.FeaturesBytes, float64(res.FeaturesBytes)/float64(tokens),
		res.V1Bytes["bf16"], float64(res.V1Bytes["bf16"])/float64(tokens), res.V1Bytes["fp32"], float64(res.V1Bytes["fp32"])/float64(tokens))
}
