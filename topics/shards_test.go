package topics

import (
	"reflect"
	"testing"
	"time"
)

// The fingerprint names the run directories already on disk: it must not change. The value was computed by
// the sink's RunOf before the computation moved here.
func TestRunFingerprintStable(t *testing.T) {
	t.Parallel()
	temp, seed := 0.7, int64(3)
	s := Sampling{MaxNewTokens: 512, Temperature: &temp, TopP: 0.9, Seed: &seed, StopTokenIDs: []int{1, 2}, Lane: "long",
		TemplateKwargs: map[string]any{"enable_thinking": false, "b": 1}}
	const want = "6b6278a8e910135153a8b802a09ecd78c043396d41a369a0bddf7b057b9d8103"
	if got := RunFingerprint("Qwen/Qwen3-8B", "abc123", s); got != want {
		t.Fatalf("RunFingerprint = %s, want %s", got, want)
	}
	// The lane is scheduling only.
	s.Lane = "short"
	if got := RunFingerprint("Qwen/Qwen3-8B", "abc123", s); got != want {
		t.Fatalf("RunFingerprint with another lane = %s, want %s", got, want)
	}
	s.MaxNewTokens = 511
	if got := RunFingerprint("Qwen/Qwen3-8B", "abc123", s); got == want {
		t.Fatal("RunFingerprint ignores max_new_tokens")
	}
}

func TestShardKey(t *testing.T) {
	t.Parallel()
	run := RunFingerprint("m", "h", Sampling{})
	a := ShardKey(run, "conv/1", 2)
	if a != run[:16]+"/2/conv/1" {
		t.Fatalf("ShardKey = %q", a)
	}
	if ShardKey(run, "conv", 12) == ShardKey(run, "2/conv", 1) {
		t.Fatal("ShardKey is ambiguous")
	}
}

func TestShardsRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	e := &ShardsEpoch{Epoch: "e1", State: EpochComplete, Dir: "d1", Path: "/out", Turns: 443, Time: time.Unix(1700000000, 0).UTC()}
	b, err := Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := PeekKind(b); err != nil || k != KindShardsEpoch {
		t.Fatalf("PeekKind = %v, %v", k, err)
	}
	var e2 ShardsEpoch
	if err := Unmarshal(b, &e2); err != nil || !reflect.DeepEqual(*e, e2) {
		t.Fatalf("round trip: %+v, %v; want %+v", e2, err, *e)
	}
	st := &ShardedTurn{Epoch: "e1", Run: "ab", ID: "x", Turn: 3}
	b, err = Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var st2 ShardedTurn
	if err := Unmarshal(b, &st2); err != nil || st2 != *st {
		t.Fatalf("round trip: %+v, %v; want %+v", st2, err, *st)
	}
	if err := Unmarshal(b, &e2); err == nil {
		t.Fatal("a sharded turn decoded as an epoch")
	}
	g := &Generation{ID: "x", Turn: 1, InShards: "e1", Thread: &Thread{Messages: []Message{{Role: "user", Content: "hi"}}}}
	b, err = Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var g2 Generation
	if err := Unmarshal(b, &g2); err != nil || g2.InShards != "e1" || g2.Thread == nil || len(g2.PromptIDs) != 0 {
		t.Fatalf("in-shards generation round trip: %+v, %v", g2, err)
	}
}
