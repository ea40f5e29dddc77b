package topics

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleStatus() *Status {
	at := time.Date(2026, 12, 3, 19, 0, 5, 0, time.UTC)
	return &Status{Stage: "generate", Instance: "gen-0-1234", Host: "gen-0", Group: "draftflow-generate",
		Topic: TopicTokenized, State: StatusRunning, Time: at, Started: at.Add(-time.Hour), IntervalSeconds: 5,
		Records: 1200, Rejected: 3, Tokens: 720000, RecordsPerSecond: 2.5, TokensPerSecond: 1500.25, RateWindowSeconds: 60,
		Endpoints: []EndpointStatus{{Name: "http://gpu1:30000", Up: true, InFlight: 48, InFlightTokens: 90000.5,
			Budget: 120000, KVPoolTokens: 200000, KVUsage: 0.71, OutputTokens: 700000, OutputTokensPerSecond: 1400,
			Retractions: 2, Requests: 1180}, {Name: "http://gpu2:30000?dp_rank=1"}},
		Stalled: "every SGLang server is full: 3 requests wait for admission, 48 in flight"}
}

// The status record is part of the contract: kind 5, the JSON header only (no token arrays).
func TestStatusWireLayout(t *testing.T) {
	t.Parallel()
	s := sampleStatus()
	data, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != Magic || data[1] != 1 || data[2] != 5 || Kind(data[2]) != KindStatus {
		t.Fatalf("header bytes % x", data[:3])
	}
	if KindStatus.String() != "status" {
		t.Fatalf("kind name %q", KindStatus)
	}
	for _, field := range []string{`"stage":"generate"`, `"instance":"gen-0-1234"`, `"records":1200`, `"tokens":720000`,
		`"records_per_s":2.5`, `"tokens_per_s":1500.25`, `"endpoints":[`, `"kv_usage":0.71`, `"retractions":2`,
		`"in_flight":48`, `"up":true`, `"output_tokens":700000`, `"state":"running"`, `"stalled":"every SGLang server is full`} {
		if !bytes.Contains(data, []byte(field)) {
			t.Errorf("encoded status lacks %s: %s", field, data)
		}
	}
	var got Status
	if err := Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, &got) {
		t.Fatalf("round trip:\n want %+v\n got  %+v", s, &got)
	}
	// A status is not any other kind, and no other kind is a status.
	var p Prompt
	if err := Unmarshal(data, &p); err == nil || !strings.Contains(err.Error(), "is a status, expected a prompt") {
		t.Fatalf("status decoded as a prompt: %v", err)
	}
	if err := Unmarshal(mustMarshal(t, &Prompt{ID: "p"}), &got); err == nil || !strings.Contains(err.Error(), "expected a status") {
		t.Fatalf("prompt decoded as a status: %v", err)
	}
	// Trailing bytes after the header are refused, as for every kind.
	if err := Unmarshal(append(append([]byte{}, data...), 0), &got); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

// Why a stage is stalled is a JSON header field: a record without it (a stage making progress, or an older
// build) still decodes, to no reason, and encodes none.
func TestStatusStalledIsOptional(t *testing.T) {
	t.Parallel()
	old := []byte(`{"stage":"generate","instance":"i","state":"running","time":"2026-12-03T19:00:05Z","started":"2026-12-03T18:00:05Z","interval_s":5,"records":1,"rejected":0,"tokens":2,"records_per_s":0,"tokens_per_s":0,"rate_window_s":0}`)
	data := append(binary.AppendUvarint([]byte{Magic, 1, byte(KindStatus)}, uint64(len(old))), old...)
	var got Status
	if err := Unmarshal(data, &got); err != nil || got.Stalled != "" || got.Records != 1 {
		t.Fatalf("record without stalled: %+v, %v", got, err)
	}
	if enc := mustMarshal(t, &Status{Stage: "sink"}); bytes.Contains(enc, []byte(`"stalled"`)) {
		t.Fatalf("empty reason encoded: %s", enc)
	}
}

func TestStatusKey(t *testing.T) {
	t.Parallel()
	if k := StatusKey("sink", "sink-0-7"); k != "sink/sink-0-7" {
		t.Fatalf("key %q", k)
	}
}

// A rejection's class is a JSON header field: old records without it still decode.
func TestRejectionClass(t *testing.T) {
	t.Parallel()
	data := mustMarshal(t, &Rejection{ID: "a", Stage: "tokenize", Reason: "prompt a is 9 tokens ...", Class: "too_long"})
	if !bytes.Contains(data, []byte(`"class":"too_long"`)) {
		t.Fatalf("no class in %s", data)
	}
	old := mustMarshal(t, &Rejection{ID: "a", Stage: "sink", Reason: "x"})
	if bytes.Contains(old, []byte(`"class"`)) {
		t.Fatalf("empty class encoded: %s", old)
	}
}
