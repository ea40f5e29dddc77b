package topics

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
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
		&Prompt{ID: "r1", Dataset: "results", Turn: 1, Origin: OriginResult, FinishReason: "length",
			InputIDs: []uint32{1, 2, 3}, OutputIDs: []uint32{4, 4294967295}, Source: Source{File: "raw.jsonl", Line: 9}},
		&Prompt{ID: "k1", Dataset: "chats", Turn: 1, Origin: OriginDataset, Messages: []Message{{Role: "user", Content: "hi"}},
			Reply: &Message{Role: "assistant", Content: "hello", ReasoningContent: "greet"}},
		&Tokenized{ID: "r1", Turn: 1, Origin: OriginRecord, FinishReason: "stop", InputIDs: []uint32{1, 2}, OutputIDs: []uint32{3}},
		&Generation{ID: "r1", Turn: 1, Origin: OriginRecord, PromptIDs: []uint32{1, 2}, OutputIDs: []uint32{3},
			Meta: GenerationMeta{FinishReason: "stop", PromptTokens: 2, CompletionTokens: 1}, StopReason: StopEnd},
		&Rejection{ID: "k1", Stage: "tokenize", Reason: "reply", Class: "reply_template", Turn: 3, Origin: OriginDataset},
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
	case *Prompt:
		// A Prompt without ids travels in version 1, which has no arrays: they decode as nil.
		if len(r.InputIDs) == 0 && len(r.OutputIDs) == 0 {
			r.InputIDs, r.OutputIDs = nil, nil
		} else {
			r.InputIDs, r.OutputIDs = nonNil(r.InputIDs), nonNil(r.OutputIDs)
		}
	case *Tokenized:
		if r.InputIDs == nil {
			r.InputIDs = []uint32{}
		}
		// A Tokenized without a kept output travels in version 1, which has no output array.
		if len(r.OutputIDs) == 0 {
			r.OutputIDs = nil
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

func nonNil(ids []uint32) []uint32 {
	if ids == nil {
		return []uint32{}
	}
	return ids
}

// Version 2 adds arrays to Prompt and Tokenized only: a record that needs none of them is written in version 1,
// byte for byte what a build that reads only version 1 reads; one that does is version 2, with the arrays in
// their documented order.
func TestWireVersions(t *testing.T) {
	t.Parallel()
	v1 := []any{
		&Prompt{ID: "p", Origin: OriginDataset, Reply: &Message{Role: "assistant", Content: "x"}},
		&Tokenized{ID: "t", InputIDs: []uint32{1}},
		&Generation{ID: "g", Origin: OriginResult, PromptIDs: []uint32{1}, OutputIDs: []uint32{2}},
		&Rejection{ID: "r", Turn: 2, Origin: OriginRecord},
	}
	for _, rec := range v1 {
		if data := mustMarshal(t, rec); data[1] != 1 {
			t.Errorf("%T written in version %d, want 1", rec, data[1])
		}
	}
	// Prompt, version 2: header, then InputIDs, then OutputIDs.
	data := mustMarshal(t, &Prompt{ID: "p", InputIDs: []uint32{7}, OutputIDs: []uint32{0x01020304, 9}})
	if data[0] != Magic || data[1] != 2 || data[2] != byte(KindPrompt) {
		t.Fatalf("prompt header bytes % x", data[:3])
	}
	tail := data[len(data)-14:]
	if want := []byte{1, 7, 0, 0, 0, 2, 4, 3, 2, 1, 9, 0, 0, 0}; !bytes.Equal(tail, want) {
		t.Fatalf("prompt token arrays % x, want % x", tail, want)
	}
	// Tokenized, version 2: InputIDs, then OutputIDs.
	data = mustMarshal(t, &Tokenized{ID: "t", InputIDs: []uint32{5}, OutputIDs: []uint32{6}})
	if data[1] != 2 {
		t.Fatalf("tokenized with a kept output written in version %d, want 2", data[1])
	}
	if tail, want := data[len(data)-10:], []byte{1, 5, 0, 0, 0, 1, 6, 0, 0, 0}; !bytes.Equal(tail, want) {
		t.Fatalf("tokenized token arrays % x, want % x", tail, want)
	}
	for _, b := range [][]byte{[]byte("input_ids"), []byte("output_ids")} {
		if bytes.Contains(data, b) {
			t.Fatalf("%s leaked into the JSON header", b)
		}
	}
}

// Records as a version-1 build wrote them, byte for byte, still decode; the fields added since read as empty.
func TestOldRecordsDecode(t *testing.T) {
	t.Parallel()
	header := func(kind Kind, h string) []byte {
		b := []byte{Magic, 1, byte(kind)}
		b = binary.AppendUvarint(b, uint64(len(h)))
		return append(b, h...)
	}
	var p Prompt
	if err := Unmarshal(header(KindPrompt, `{"id":"a","dataset":"d","turn":0,"messages":[{"role":"user","content":"hi"}],"sampling":{},"source":{}}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.ID != "a" || p.Origin != "" || p.InputIDs != nil || p.Reply != nil || Kept(p.Origin) {
		t.Fatalf("old prompt decoded as %+v", p)
	}
	var tk Tokenized
	if err := Unmarshal(append(header(KindTokenized, `{"id":"a","turn":0}`), 2, 1, 0, 0, 0, 2, 0, 0, 0), &tk); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tk.InputIDs, []uint32{1, 2}) || len(tk.OutputIDs) != 0 || tk.Origin != "" {
		t.Fatalf("old tokenized decoded as %+v", tk)
	}
	var g Generation
	if err := Unmarshal(append(header(KindGeneration, `{"id":"a","meta":{"finish_reason":"stop"}}`), 1, 1, 0, 0, 0, 1, 2, 0, 0, 0), &g); err != nil {
		t.Fatal(err)
	}
	if OriginOf(g.Origin) != OriginGenerated || !slices.Equal(g.OutputIDs, []uint32{2}) {
		t.Fatalf("old generation decoded as %+v", g)
	}
	// A version-2 record whose kind has no second array in version 1 does not decode as version 1.
	v2 := mustMarshal(t, &Tokenized{ID: "t", InputIDs: []uint32{5}, OutputIDs: []uint32{6}})
	v2[1] = 1
	if err := Unmarshal(v2, &tk); err == nil || !strings.Contains(err.Error(), "trailing bytes") {
		t.Fatalf("a version-2 tokenized read as version 1: %v", err)
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
		"version 0":   {append([]byte{Magic, 0}, good[2:]...), "format version 0"},
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
	if err := Unmarshal(append([]byte{Magic, Version + 1}, good[2:]...), &g); !errors.Is(err, ErrUnknownVersion) {
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
	case *Prompt:
		ids, _ = func() (string, error) { b, e := json.Marshal([][]uint32{r.InputIDs, r.OutputIDs}); return string(b), e }()
	case *Tokenized:
		ids, _ = func() (string, error) { b, e := json.Marshal([][]uint32{r.InputIDs, r.OutputIDs}); return string(b), e }()
	case *Generation:
		ids, _ = func() (string, error) {
			b, e := json.Marshal([][]uint32{r.PromptIDs, r.OutputIDs})
			return string(b), e
		}()
	}
	return string(b) + ids
}
