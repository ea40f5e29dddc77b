package generate

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/stages/generate/admission"
	"github.com/draftflow/draftflow/stages/generate/internal/fakesglang"
)

// TestStallNoServerAnswers: with nothing listening at the endpoint, the stall reason names the URL and the
// refusal as soon as the first probe failed, and says nothing before.
func TestStallNoServerAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const url = "http://nothing-listens.invalid:30000"
		var nilStall *Stall
		if nilStall.Reason() != "" {
			t.Fatal("a nil Stall gave a reason")
		}
		d := startDriver(t, fakesglang.NewNet(), admission.Config{Endpoints: []string{url}, Policy: admission.PolicyFixed}, nil)
		defer d.stop()
		var st Stall
		if st.Reason() != "" {
			t.Fatal("a Stall of no stage gave a reason")
		}
		st.start(d.ctl)
		got := st.Reason()
		if !strings.HasPrefix(got, "no SGLang server answers ("+url+": ") || !strings.Contains(got, "connection refused") {
			t.Fatalf("reason %q, want no server answers, with the URL and why", got)
		}
	})
}

// TestStallEveryServerFull: requests waiting on a server at its budget are a stall once no answer came for
// StallAfter, and not before; an answer ends it for another StallAfter.
func TestStallEveryServerFull(t *testing.T) {
	fakes := fakesglang.NewNet()
	f := fakes.Add(t, 10000)
	ctl, err := admission.NewController(admission.Config{Endpoints: []string{f.URL}, HTTPClient: fakes.Client(),
		Registerer: prometheus.NewRegistry(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Probe(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	st := Stall{now: func() time.Time { return now }}
	st.start(ctl)
	for i := range 8 { // 2000 tokens each against a 10000-token budget: 5 admitted, 3 wait
		ctl.Offer(testRequest(fmt.Sprint("r", i), 1000, 1000), nil)
	}
	if got := st.Reason(); got != "" {
		t.Fatalf("reason %q at once, want none before StallAfter", got)
	}
	now = now.Add(StallAfter)
	want := "every SGLang server is full: 3 requests wait for admission, 5 in flight"
	if got := st.Reason(); got != want {
		t.Fatalf("reason %q after StallAfter without an answer, want %q", got, want)
	}
	st.answer(true)
	if got := st.Reason(); got != "" {
		t.Fatalf("reason %q right after an answer, want none", got)
	}
	if a, c := st.Answered(); a != 1 || c != 1 {
		t.Fatalf("Answered %d, %d; want 1, 1", a, c)
	}
}
