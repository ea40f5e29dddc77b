package topics

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

func sampleRecords() []any {
	samp := Sampling{MaxNewTokens: 10240, Temperature: f64(0.6), TopP: 0.95, Seed: i64(7), Lane: "short",
		TemplateKwargs: map[string]any{"enable_thinking": true}}
	return []any{
		&Prompt{ID: "a1", Dataset: "glaive", Messages: []Message{{Role: "system", Content: "be brief"},
			{Role: "user", Content: "héllo 世界 🚀"}, {Role: "assistant", ContentNull: true, ToolCalls: json.RawMessage(`[{"function":{"name":"f"}}]`)}}, Tools: json.RawMessage(`[{"type":"function"}]`),
			Sampling: samp, Source: Source{File: "x.jsonl", Line: 3}},
		&Tokenized{ID: "a1", Dataset: "glaive", Sampling: samp, Model: "m", TokenizerHash: "abc",
			InputIDs: []uint32{0, 1, 128000, 4294967295}},
		&Generation{ID: "a1", Dataset: "glaive", Turn: 2, Model: "m", PromptIDs: []uint32{5, 6},
			OutputIDs: []uint32{7, 8, 9}, Meta: GenerationMeta{FinishReason: "stop", FinishMatched: json.RawMessage(`128009`),
				PromptTokens: 2, CompletionTokens: 3, Retractions: 1, LatencySeconds: 1.5, Endpoint: "http://x"}},
		&Rejection{ID: "a1", Stage: "tokenize", Reason: "too long", Class: "too_long", Topic: "prompts", Partition: 3, Offset: 99,
			Payload: []byte{0xff, 0x00}},
		&Tokenized{ID: "empty"},
		sampleStatus(),
		&Status{Stage: "sink"},
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, rec := range sampleRecords() {
		data, err := Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		got := reflect.New(reflect.TypeOf(rec).Elem()).Interface()
		if err := Unmarshal(data, got); err != nil {
			t.Fatalf("%T: %v", rec, err)
		}
		// Token arrays decode as non-nil empty slices; normalise for comparison.
		normalise(rec)
		normalise(got)
		if !reflect.DeepEqual(rec, got) {
			t.Fatalf("round trip %T:\n want %+v\n got  %+v", rec, rec, got)
		}
	}
}

func normalise(v any) {
	switch r := v.(type) {
	case *Tokenized:
		if r.InputIDs == nil {
			r.InputIDs = []uint32{}
		}
	case *Generation:
		if r.PromptIDs == nil {
			r.PromptIDs = []uint32{}
		}
		if r.OutputIDs == nil {
			r.OutputIDs = []uint32{}
		}
	}
}

// The wire layout is a contract: pin it byte for byte.
func TestWireLayout(t *testing.T) {
	t.Parallel()
	data, err := Marshal(&Tokenized{ID: "x", InputIDs: []uint32{1, 0x01020304}})
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != 0xDF || data[1] != 1 || data[2] != byte(KindTokenized) {
		t.Fatalf("header bytes % x", data[:3])
	}
	tail := data[len(data)-9:]
	want := []byte{2, 1, 0, 0, 0, 4, 3, 2, 1}
	if !bytes.Equal(tail, want) {
		t.Fatalf("token array bytes % x, want % x", tail, want)
	}
	if bytes.Contains(data, []byte("16909060")) || bytes.Contains(data, []byte("input_ids")) {
		t.Fatal("token ids leaked into the JSON header")
	}
}

func TestTokensAreCompact(t *testing.T) {
	t.Parallel()
	ids := make([]uint32, 32768)
	for i := range ids {
		ids[i] = uint32(i * 7919 % 200000)
	}
	data, err := Marshal(&Generation{ID: "long", PromptIDs: ids[:16384], OutputIDs: ids[16384:]})
	if err != nil {
		t.Fatal(err)
	}
	if over := len(data) - 4*len(ids); over > 512 {
		t.Fatalf("%d bytes for %d tokens: %d bytes over 4 per token", len(data), len(ids), over)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	good, _ := Marshal(&Generation{ID: "g", PromptIDs: []uint32{1}, OutputIDs: []uint32{2}})
	cases := map[string]struct {
		data []byte
		want string
	}{
		"empty":       {nil, "too short"},
		"magic":       {append([]byte{'{'}, good[1:]...), "bad magic"},
		"version":     {append([]byte{Magic, 9}, good[2:]...), "format version 9"},
		"kind":        {append([]byte{Magic, Version, 77}, good[3:]...), "unknown record kind 77"},
		"wrong kind":  {mustMarshal(t, &Prompt{ID: "p"}), "is a prompt, expected a generation"},
		"truncated":   {good[:len(good)-2], "token array 1"},
		"trailing":    {append(append([]byte{}, good...), 0), "trailing bytes"},
		"huge count":  {append(append([]byte{}, good[:len(good)-5]...), 0xff, 0xff, 0xff, 0xff, 0x0f), "claims"},
		"bad header":  {[]byte{Magic, Version, byte(KindGeneration), 2, '{', '}' + 1}, "bad generation header"},
		"header size": {[]byte{Magic, Version, byte(KindGeneration), 50, '{'}, "truncated header"},
	}
	for name, c := range cases {
		var g Generation
		err := Unmarshal(c.data, &g)
		var de *DecodeError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a DecodeError containing %q", name, err, c.want)
		}
	}
	var g Generation
	if err := Unmarshal(append([]byte{Magic, 2}, good[2:]...), &g); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("future version: %v does not wrap ErrUnknownVersion", err)
	}
}

func TestRejectionPayloadTruncated(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("x"), MaxRejectedPayload+100)
	r := &Rejection{Stage: "ingest", Reason: "line too long", Payload: big}
	data, err := Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got Rejection
	if err := Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Payload) != MaxRejectedPayload || len(r.Payload) != len(big) {
		t.Fatalf("payload %d bytes (caller's %d)", len(got.Payload), len(r.Payload))
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzUnmarshal(f *testing.F) {
	for _, rec := range sampleRecords() {
		b, _ := Marshal(rec)
		f.Add(b)
	}
	f.Add([]byte{Magic, Version, byte(KindGeneration), 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		targets := []any{&Prompt{}, &Tokenized{}, &Generation{}, &Rejection{}, &Status{}}
		for _, v := range targets {
			if err := Unmarshal(data, v); err != nil {
				continue
			}
			// Anything that decodes must re-encode and decode to the same record.
			again, err := Marshal(v)
			if err != nil {
				t.Fatalf("re-marshal %T: %v", v, err)
			}
			w := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if err := Unmarshal(again, w); err != nil {
				t.Fatalf("decode of re-encoded %T: %v", v, err)
			}
			normalise(v)
			normalise(w)
			if !reflect.DeepEqual(jsonOf(v), jsonOf(w)) {
				t.Fatalf("%T not stable:\n%s\n%s", v, jsonOf(v), jsonOf(w))
			}
		}
	})
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	var ids string
	switch r := v.(type) {
	case *Tokenized:
		ids, _ = func() (string, error) { b, e := json.Marshal(r.InputIDs); return string(b), e }()
	case *Generation:
		ids, _ = func() (string, error) {
			b, e := json.Marshal([][]uint32{r.PromptIDs, r.OutputIDs})
			return string(b), e
		}()
	}
	return string(b) + ids
}
