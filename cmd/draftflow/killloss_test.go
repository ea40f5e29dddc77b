package main

// Answers lost to a kill: `draftflow run` on the bundled sample against a simulated server at 20x behind a
// counting proxy, SIGKILLed at several points of its first seconds, then started again into the same --out.
// The proxy records when each (id, turn) was answered before the kill and which the second start asks again.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/sglang/sim"
)

// answerProxy forwards /generate to the server of the current phase and records, per request (rid without its
// attempt suffix: id#turn), when it was asked and when it was answered (HTTP 200 written in full).
type answerProxy struct {
	mu       sync.Mutex
	backend  http.Handler
	asked    map[string][]time.Time
	answered map[string]time.Time
}

func newAnswerProxy(backend http.Handler) *answerProxy {
	return &answerProxy{backend: backend, asked: map[string][]time.Time{}, answered: map[string]time.Time{}}
}

// baseRID strips the attempt suffix (".N;") of an attempt's rid.
func baseRID(rid string) string {
	rid = strings.TrimSuffix(rid, ";")
	if i := strings.LastIndexByte(rid, '.'); i > strings.LastIndexByte(rid, '#') {
		rid = rid[:i]
	}
	return rid
}

// statusRecorder remembers the status written through it.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }

func (p *answerProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	backend := p.backend
	p.mu.Unlock()
	if r.URL.Path != "/generate" {
		backend.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		RID string `json:"rid"`
	}
	_ = json.Unmarshal(body, &req)
	rid := baseRID(req.RID)
	p.mu.Lock()
	p.asked[rid] = append(p.asked[rid], time.Now())
	p.mu.Unlock()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	backend.ServeHTTP(rec, r)
	if rec.status == http.StatusOK {
		p.mu.Lock()
		if _, ok := p.answered[rid]; !ok {
			p.answered[rid] = time.Now()
		}
		p.mu.Unlock()
	}
}

// phase switches the proxy to backend and returns what it recorded since the last switch.
func (p *answerProxy) phase(backend http.Handler) (asked map[string][]time.Time, answered map[string]time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	asked, answered = p.asked, p.answered
	p.backend, p.asked, p.answered = backend, map[string][]time.Time{}, map[string]time.Time{}
	return asked, answered
}

// killPoint is what one kill cost.
type killPoint struct {
	after         time.Duration // from the start of the process to the kill
	answered      int           // answers the server gave before the kill
	reasked       int           // of them, asked again by the second start
	reaskedOld    int           // of those, answered more than killLossBound before the kill
	oldestReasked time.Duration // how long before the kill the oldest answer asked again was given
}

// killLossBound is how long an answer may be held in memory only: one answered longer before a kill is durable.
const killLossBound = 1500 * time.Millisecond

// TestRunKillLosesNoAnswer measures what a SIGKILL of `draftflow run` costs in answers: the run is killed at
// several points of its first seconds against a server at 20x, started again into the same --out (against an
// instant server, so that it ends quickly), and every answer given before the kill that the second start asks
// for again is GPU work done twice. An answer given more than killLossBound before the kill must not be asked
// for again.
func TestRunKillLosesNoAnswer(t *testing.T) {
	points := []time.Duration{1500 * time.Millisecond, 3 * time.Second, 6 * time.Second, 10 * time.Second}
	if s := os.Getenv("DRAFTFLOW_KILL_POINTS"); s != "" {
		points = nil
		for _, f := range strings.Split(s, ",") {
			d, err := time.ParseDuration(f)
			if err != nil {
				t.Fatal(err)
			}
			points = append(points, d)
		}
	}
	// DRAFTFLOW_KILL_SIM_MEAN sets the server's mean output length (default 600, as `draftflow run`'s own
	// simulator); DRAFTFLOW_KILL_ARGS adds flags to both starts.
	simMean := 600.0
	if s := os.Getenv("DRAFTFLOW_KILL_SIM_MEAN"); s != "" {
		var err error
		if simMean, err = strconv.ParseFloat(s, 64); err != nil {
			t.Fatal(err)
		}
	}
	h := newITest(t, kafka.Config{})
	simCfg := func(scale float64, instant bool) http.Handler {
		cfg := sim.Config{TimeScale: scale, Instant: instant, Seed: 7, OutputLenMean: simMean, Logger: h.log,
			VocabSize: h.model.Tokenizer.VocabSize(), SpecialTokenStart: h.model.SpecialTokenStart, ContextLength: h.model.ContextLength}
		for _, id := range h.model.EOSTokenIDs {
			cfg.EOSTokenIDs = append(cfg.EOSTokenIDs, int(id))
		}
		if os.Getenv("DRAFTFLOW_KILL_SIM_UNSHAPED") != "" { // as `draftflow sim` starts: shaped after no model
			cfg.VocabSize, cfg.SpecialTokenStart, cfg.ContextLength, cfg.EOSTokenIDs = 0, 0, 0, nil
		}
		s, err := sim.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	data, err := filepath.Abs("../../testdata/sample/conversations.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var results []killPoint
	for _, at := range points {
		p := newAnswerProxy(simCfg(20, false))
		srv := httptest.NewServer(p)
		out := t.TempDir()
		logf, err := os.Create(filepath.Join(t.TempDir(), "run.log"))
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"--input", data, "--out", out, "--sglang", srv.URL, "--log-level", "warn"}
		args = append(args, strings.Fields(os.Getenv("DRAFTFLOW_KILL_ARGS"))...)
		first := runProcess(t, logf, args...)
		exited := make(chan error, 1)
		go func() { exited <- first.Wait() }()
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("the run ended (%v) before the kill at %v:\n%s", err, at, b)
		case <-time.After(at):
		}
		_ = first.Process.Signal(syscall.SIGKILL)
		killed := time.Now()
		<-exited
		// Answers the server finishes after the kill reach nobody: the second start's (instant) server takes over.
		_, answered := p.phase(simCfg(0, true))
		second := runProcess(t, logf, args...)
		if err := second.Wait(); err != nil {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("the second run after the kill at %v: %v\n%s", at, err, b)
		}
		asked, _ := p.phase(simCfg(0, true))
		srv.Close()
		logf.Close()
		kp := killPoint{after: at}
		for rid, when := range answered {
			if !when.Before(killed) {
				continue
			}
			kp.answered++
			if len(asked[rid]) == 0 {
				continue
			}
			kp.reasked++
			kp.oldestReasked = max(kp.oldestReasked, killed.Sub(when))
			if killed.Sub(when) > killLossBound {
				kp.reaskedOld++
			}
		}
		results = append(results, kp)
		t.Logf("killed at %v: %d answers before the kill, %d asked again after it (%d answered more than %v before the kill; "+
			"the oldest %v before)", at, kp.answered, kp.reasked, kp.reaskedOld, killLossBound, kp.oldestReasked.Round(10*time.Millisecond))
	}
	if slices.ContainsFunc(results, func(kp killPoint) bool { return kp.reaskedOld > 0 }) {
		var b strings.Builder
		for _, kp := range results {
			fmt.Fprintf(&b, "\n  kill at %v: %d answered, %d asked again, %d of them answered over %v before the kill", kp.after, kp.answered,
				kp.reasked, kp.reaskedOld, killLossBound)
		}
		t.Fatalf("answers given well before a kill were asked for again:%s", b.String())
	}
}
