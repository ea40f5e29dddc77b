package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"

	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/stages/generate/sim"
)

// TestFeedbackMatchesHTTP checks that the feedback the bench hands the Controller without HTTP (capacity,
// load, the retraction counter and each answer's completion length and retractions) is what the stage's
// client reads over HTTP from the same simulated server: the bench exercises the stage's feedback path.
func TestFeedbackMatchesHTTP(t *testing.T) {
	s, err := sim.NewManual(sim.Config{MaxTotalTokens: 4000, OutputLenDistribution: sim.DistFixed, OutputLenMean: 1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := httptest.NewServer(s)
	defer h.Close()
	cl := generate.NewClient(h.URL, h.Client())
	ctx := context.Background()

	// Eight requests over HTTP (the stage's Generate call), each producing 900 tokens on a 4,000-token pool:
	// the server queues some and retracts others.
	const n = 8
	type answer struct {
		resp *generate.GenerateResponse
		err  error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]uint32, 100+10*i)
			for j := range ids {
				ids[j] = uint32(1000*i + j)
			}
			answers[i].resp, answers[i].err = cl.Generate(ctx, &generate.GenerateRequest{InputIDs: ids, RID: fmt.Sprintf("r%d", i),
				SamplingParams: generate.SamplingParams{MaxNewTokens: 2000, MinNewTokens: 899}})
		}()
	}
	for s.Stats().Waiting < n {
		// The handlers submit on their own goroutines; wait until all are queued.
		runtime.Gosched()
	}
	finished := map[string]sim.Finished{}
	sawQueue, sawRetraction, compared := false, false, 0
	var now float64
	for len(finished) < n {
		end, busy := s.Poll(now)
		if !busy {
			t.Fatalf("server idle with %d of %d finished", len(finished), n)
		}
		now = end
		for _, f := range s.Finish() {
			finished[f.RID] = f
		}
		load, retracted := loadOf(s)
		sawQueue = sawQueue || load.Waiting > 0 && load.Running > 0
		sawRetraction = sawRetraction || retracted > 0
		if load.Running+load.Waiting == 0 || int(now*10)%7 != 0 {
			continue
		}
		// Mid-run, compare the load and counter the bench computes with what the client reads.
		got, err := cl.Loads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != load {
			t.Fatalf("at %.2fs /v1/loads gives %+v, the bench %+v", now, got, load)
		}
		compared++
		total, ok, err := cl.RetractedTotal(ctx)
		if err != nil || !ok || total != retracted {
			t.Fatalf("at %.2fs /metrics gives %v retractions (ok %v, err %v), the bench %v", now, total, ok, err, retracted)
		}
	}
	wg.Wait()
	if !sawQueue || !sawRetraction || compared < 3 {
		t.Fatalf("scenario too easy: queue seen %v, retraction seen %v, %d comparisons", sawQueue, sawRetraction, compared)
	}
	info, err := cl.ServerInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := capacityOf(s); info != want {
		t.Fatalf("/get_server_info gives %+v, the bench %+v", info, want)
	}
	retractions := 0
	for i, a := range answers {
		if a.err != nil {
			t.Fatalf("request %d: %v", i, a.err)
		}
		f := finished[fmt.Sprintf("r%d", i)]
		m := a.resp.MetaInfo
		if len(a.resp.OutputIDs) != f.CompletionTokens || m.Retractions() != f.Retractions || m.E2ELatency != f.E2ELatency ||
			f.CompletionTokens != 900 {
			t.Fatalf("request %d: HTTP answer (%d tokens, %d retractions, %vs) vs bench %+v", i, len(a.resp.OutputIDs),
				m.Retractions(), m.E2ELatency, f)
		}
		retractions += f.Retractions
	}
	if _, total := loadOf(s); float64(retractions) != total {
		t.Fatalf("meta_info retractions add up to %d, the server counter says %v", retractions, total)
	}
}
