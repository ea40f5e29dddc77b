package admission

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

func TestLengthEstimatorConditional(t *testing.T) {
	e := NewLengthEstimator(0.9, 100, 0)
	k := LengthKey{Dataset: "d", Lane: "l"}
	if got := e.FinishShare(k, 0, 100, 1000); got != 0 {
		t.Fatalf("share %v without data, want 0", got)
	}
	if got := e.ExpectedAfter(k, 50, 1000); got != 1000 {
		t.Fatalf("expected after 50 tokens without data: %d, want max_new_tokens", got)
	}
	for i := 1; i <= 100; i++ {
		e.Observe(k, 10*i) // 10..1000
	}
	if got := e.ExpectedAfter(k, 0, 5000); got != e.Expected(k, 5000) || got != 900 {
		t.Fatalf("expected after 0 tokens %d, want the plain quantile 900", got)
	}
	// Past 500 tokens the survivors are 510..1000: their 0.9 quantile is 950.
	if got := e.ExpectedAfter(k, 500, 5000); got != 950 {
		t.Fatalf("expected after 500 tokens %d, want 950", got)
	}
	if got := e.ExpectedAfter(k, 500, 700); got != 700 {
		t.Fatalf("expected after 500 tokens with max 700: %d, want 700", got)
	}
	// Past 990 tokens too few completions are longer: charged max_new_tokens.
	if got := e.ExpectedAfter(k, 990, 5000); got != 5000 {
		t.Fatalf("expected after 990 tokens %d, want 5000", got)
	}
	// Of the 50 completions over 500 tokens, 10 ended by 600.
	if got := e.FinishShare(k, 500, 100, 5000); got != 0.2 {
		t.Fatalf("finish share %v, want 0.2", got)
	}
	if got := e.FinishShare(k, 500, 100, 550); got != 1 {
		t.Fatalf("finish share %v for a request that reaches max_new_tokens, want 1", got)
	}
	if got := e.RecentMean(10); got != 955 {
		t.Fatalf("mean of the last 10 %v, want 955", got)
	}
	for range 10 {
		e.Observe(k, 1) // the ring wraps
	}
	if got := e.RecentMean(10); got != 1 {
		t.Fatalf("mean of the last 10 after wrapping %v, want 1", got)
	}
	if got := e.RecentMean(20); got != (1*10+(910+1000)*10/2)/20.0 {
		t.Fatalf("mean of the last 20 after wrapping %v", got)
	}
}
