package generate

import "testing"

func TestLengthEstimatorQuantile(t *testing.T) {
	e := NewLengthEstimator(0.9, 100, 0)
	k := LengthKey{Dataset: "a", Lane: "short"}
	if got := e.Expected(k, 8000); got != 8000 {
		t.Fatalf("prior without data = %d, want max_new_tokens 8000", got)
	}
	for i := 1; i <= 100; i++ {
		e.Observe(k, i*10)
	}
	if got := e.Expected(k, 8000); got != 900 {
		t.Fatalf("q0.9 of 10..1000 = %d, want 900", got)
	}
	if got := e.Expected(k, 500); got != 500 {
		t.Fatalf("estimate not clipped by max_new_tokens: %d", got)
	}
	// Another dataset of the same lane, without data of its own, borrows the lane's estimate.
	if got := e.Expected(LengthKey{Dataset: "b", Lane: "short"}, 8000); got != 900 {
		t.Fatalf("lane fallback = %d, want 900", got)
	}
	// An unknown lane falls back to every completion.
	if got := e.Expected(LengthKey{Dataset: "z", Lane: "other"}, 8000); got != 900 {
		t.Fatalf("global fallback = %d, want 900", got)
	}
	// The window follows a shift: after 100 completions of 5000 tokens the old lengths are gone.
	for range 100 {
		e.Observe(k, 5000)
	}
	if got := e.Expected(k, 8000); got != 5000 {
		t.Fatalf("after the shift = %d, want 5000", got)
	}
	if st := e.Snapshot()[k]; st.Samples != 200 || st.Quantile != 5000 {
		t.Fatalf("snapshot %+v", st)
	}
}

func TestLengthEstimatorPriorAndMinimumSamples(t *testing.T) {
	e := NewLengthEstimator(0.5, 64, 3000)
	k := LengthKey{Dataset: "a"}
	if got := e.Expected(k, 10240); got != 3000 {
		t.Fatalf("configured prior = %d, want 3000", got)
	}
	if got := e.Expected(k, 1000); got != 1000 {
		t.Fatalf("prior not clipped: %d", got)
	}
	for range minLengthSamples - 1 {
		e.Observe(k, 7)
	}
	if got := e.Expected(k, 10240); got != 3000 {
		t.Fatalf("estimate trusted after %d samples: %d", minLengthSamples-1, got)
	}
	e.Observe(k, 7)
	if got := e.Expected(k, 10240); got != 7 {
		t.Fatalf("estimate after %d samples = %d, want 7", minLengthSamples, got)
	}
	// A key without dataset or lane is counted once, not three times.
	if st := e.Snapshot()[LengthKey{}]; st.Samples != minLengthSamples {
		t.Fatalf("global samples %d, want %d", st.Samples, minLengthSamples)
	}
}
