package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/metrics"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/stages/generate"
	"github.com/draftflow/draftflow/status"
	"github.com/draftflow/draftflow/topics"
)

// `draftflow status` on a pipeline run the way `draftflow run` runs it: while it runs, every stage's group has
// members, the generate stage's endpoint figures arrive; once it finished, every group has committed its whole
// input (lag 0, committed == end), the rejections by stage and reason are those the input causes, and the JSON
// document has the documented shape. Then --watch prints one block per refresh, in place on a terminal.
func TestIntegrationStatus(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	kc.Logger = testLogger(t)
	dir := t.TempDir()
	const prompts, long, malformed = 30, 3, 2
	var lines []string
	for i := range prompts {
		lines = append(lines, fmt.Sprintf(`{"id": "p%d", "messages": [{"role": "user", "content": "question number %d"}]}`, i, i))
	}
	for i := range long {
		lines = append(lines, fmt.Sprintf(`{"id": "long%d", "messages": [{"role": "user", "content": %q}]}`, i,
			strings.Repeat("tell me about the weather in every city you know ", 40)))
	}
	for range malformed {
		lines = append(lines, `{"messages": [`)
	}
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	reg := metrics.NewRegistry()
	rc := simRun(kc, filepath.Join(dir, "out"), input)
	rc.Logger = kc.Logger
	rc.Ingest.Defaults.MaxNewTokens = 32
	rc.Ingest.Registerer = reg
	rc.Tokenize.ContextLength = 128 // the long prompts do not fit
	rc.Tokenize.Registerer = reg
	rc.Generate.Registerer = reg
	// Two requests at a time, 150 ms each: generation lasts seconds, several status intervals.
	rc.Generate.Policy, rc.Generate.Concurrency = generate.PolicyFixed, 2
	rc.Sink.Registerer = reg
	rc.Sim.OutputLenMean = 20
	rc.Sim.Faults.AddedLatency = 150 * time.Millisecond
	rc.Gatherer = reg
	rc.StatusInterval = 200 * time.Millisecond
	rc.Timeout = 3 * time.Minute
	type result struct {
		res *pipeline.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := pipeline.Run(context.Background(), rc)
		done <- result{res, err}
	}()

	// The stages `draftflow status` shows: capture among them, but only where a pipeline runs it (not here).
	col := status.NewCollector(status.CollectorConfig{Client: kafkatest.Client(t, kc), Stages: statusStages("", "", "", "")})
	collect := func() *status.Report {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := col.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	stageOf := func(r *status.Report, name string) status.StageReport {
		t.Helper()
		for _, s := range r.Stages {
			if s.Stage == name {
				return s
			}
		}
		t.Fatalf("no stage %s in %+v", name, r.Stages)
		return status.StageReport{}
	}

	// While it runs: members in every group, named after the process's status instance, and endpoint figures.
	var finished *result
	sawMembers, sawEndpoint := map[string]bool{}, false
	for finished == nil && (len(sawMembers) < 3 || !sawEndpoint) {
		r := collect()
		for _, name := range []string{"tokenize", "generate", "sink"} {
			s := stageOf(r, name)
			if len(s.Members) > 0 {
				m := s.Members[0]
				if !strings.HasPrefix(m.ClientID, "draftflow-"+status.DefaultInstance()) || m.Host == "" || len(m.Partitions[s.Topic]) == 0 {
					t.Errorf("%s member %+v", name, m)
				}
				sawMembers[name] = true
			}
		}
		for _, e := range stageOf(r, "generate").Endpoints {
			if strings.HasPrefix(e.Name, "http://") && e.Up && e.Budget > 0 && e.Instance == status.DefaultInstance() &&
				e.OutputTokens > 0 && e.OutputTokensPerSecond > 0 {
				sawEndpoint = true
			}
		}
		select {
		case res := <-done:
			finished = &res
		case <-time.After(100 * time.Millisecond):
		}
	}
	if len(sawMembers) < 3 || !sawEndpoint {
		t.Fatalf("while running: members seen in %v, endpoint figures seen: %v", sawMembers, sawEndpoint)
	}
	if finished == nil {
		res := <-done
		finished = &res
	}
	if finished.err != nil {
		t.Fatal(finished.err)
	}
	if res := finished.res; res.Written != prompts || res.PipelineRejected != long || res.IngestRejected != malformed {
		t.Fatalf("run: %d written, %d rejected by the pipeline, %d malformed lines", res.Written, res.PipelineRejected, res.IngestRejected)
	}

	// Finished: the JSON document as `draftflow status --json` prints it.
	var buf bytes.Buffer
	if err := showStatus(context.Background(), &buf, col, false, true, time.Second, false); err != nil {
		t.Fatal(err)
	}
	var r status.Report
	if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
		t.Fatalf("%v in %s", err, buf.String())
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"time", "stages", "rejections", "rejected_total", "warnings"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, buf.String())
		}
	}
	for _, s := range r.Stages {
		if s.Stage == "capture" {
			t.Errorf("a capture stage in the status of a pipeline without capture: %+v", s)
		}
	}
	wantEnd := map[string]int64{"tokenize": prompts + long, "generate": prompts, "sink": prompts}
	for _, name := range []string{"tokenize", "generate", "sink"} {
		s := stageOf(&r, name)
		if s.Lag != 0 || s.Committed != s.End || s.End != wantEnd[name] || s.ETASeconds == nil || *s.ETASeconds != 0 {
			t.Errorf("%s at the end: committed %d, end %d (want %d), lag %d, eta %v", name, s.Committed, s.End, wantEnd[name], s.Lag, s.ETASeconds)
		}
		if len(s.Members) != 0 {
			t.Errorf("%s: members %+v after the run", name, s.Members)
		}
		if len(s.Instances) != 1 || s.Instances[0].State != topics.StatusStopped {
			t.Errorf("%s instances %+v, want one, stopped", name, s.Instances)
		}
	}
	if s := stageOf(&r, "tokenize"); s.Records != prompts+long || s.Rejected != long || s.Tokens == 0 {
		t.Errorf("tokenize figures: %d records, %d rejected, %d tokens", s.Records, s.Rejected, s.Tokens)
	}
	if s := stageOf(&r, "sink"); s.Records != prompts || s.Tokens == 0 {
		t.Errorf("sink figures: %d records, %d tokens", s.Records, s.Tokens)
	}
	gen := stageOf(&r, "generate")
	if gen.Records != prompts || gen.Tokens == 0 || len(gen.Endpoints) != 1 {
		t.Fatalf("generate figures: %d records, %d tokens, endpoints %+v", gen.Records, gen.Tokens, gen.Endpoints)
	}
	if e := gen.Endpoints[0]; e.Requests != prompts || e.OutputTokens != gen.Tokens || e.KVPoolTokens == 0 || e.InFlight != 0 {
		t.Errorf("endpoint %+v", e)
	}
	wantRej := map[[2]string]int64{{"ingest", "invalid_json"}: malformed, {"tokenize", "too_long"}: long}
	got := map[[2]string]int64{}
	for _, rc := range r.Rejections {
		got[[2]string{rc.Stage, rc.Reason}] = rc.Count
	}
	if fmt.Sprint(got) != fmt.Sprint(wantRej) || r.RejectedTotal != malformed+long {
		t.Errorf("rejections %v (total %d), want %v", got, r.RejectedTotal, wantRej)
	}
	for _, w := range r.Warnings {
		t.Errorf("warning after a clean run: %s", w)
	}

	var text bytes.Buffer
	if err := status.Render(&text, &r); err != nil {
		t.Fatal(err)
	}
	t.Logf("status after the run:\n%s\n%s", text.String(), buf.String())

	// --watch: plain blocks one after another when stdout is no terminal, redrawn in place on one.
	for _, tty := range []bool{false, true} {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := showStatus(ctx, &out, col, true, false, 300*time.Millisecond, tty); err != nil {
			t.Fatal(err)
		}
		cancel()
		blocks := strings.Count(out.String(), "draftflow status ")
		clears := strings.Count(out.String(), "\x1b[H\x1b[2J")
		if blocks < 2 || (tty && clears != blocks) || (!tty && clears != 0) || !strings.Contains(out.String(), "tokenize  draftflow-tokenize") {
			t.Errorf("watch (tty %v): %d blocks, %d clears:\n%s", tty, blocks, clears, out.String())
		}
	}
}

// TestStatusCapture: `draftflow status` shows the capture stage of a run with capture as it shows the others:
// its consumer group on the shard-files topic (every announcement committed at the end), the run's status
// records for it (one instance, stopped, the shards it finished and the tokens whose features it wrote), and a
// row in the rendered table.
func TestStatusCapture(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	kc.Logger = testLogger(t)
	out := t.TempDir()
	reg := metrics.NewRegistry()
	rc := simRun(kc, out, sampleFile)
	rc.Logger = kc.Logger
	rc.Ingest.Defaults.MaxNewTokens = 32
	rc.Ingest.Registerer = reg
	rc.Tokenize.Registerer = reg
	rc.Generate.Registerer = reg
	rc.Sink.Registerer = reg
	rc.Sink.RotateRows = 40
	rc.Sim.OutputLenMean = 20
	simCapture(&rc, reg)
	rc.Gatherer = reg
	rc.StatusInterval = 200 * time.Millisecond
	rc.Timeout = 5 * time.Minute
	if _, err := pipeline.Run(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	var shards, tokens int64
	runs, err := shard.RunDirs(out)
	if err != nil || len(runs) == 0 {
		t.Fatalf("runs under %s: %v %v", out, runs, err)
	}
	for _, rd := range runs {
		m, err := shard.ReadManifest(rd)
		if err != nil {
			t.Fatal(err)
		}
		shards += int64(len(m.Shards))
		tokens += m.Totals.Tokens
	}

	col := status.NewCollector(status.CollectorConfig{Client: kafkatest.Client(t, kc), Stages: statusStages("", "", "", "")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := col.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var capture *status.StageReport
	for i, s := range r.Stages {
		names = append(names, s.Stage)
		if s.Stage == "capture" {
			capture = &r.Stages[i]
		}
	}
	if want := "tokenize generate sink capture"; !strings.Contains(strings.Join(names, " "), want) || capture == nil {
		t.Fatalf("stages %v, want %q in order", names, want)
	}
	s := *capture
	// The sink announced every shard (as it committed them, and again when the run's final capture began).
	if s.Group != "draftflow-capture" || s.Topic != "shard-files" || s.End < shards || s.Committed != s.End || s.Lag != 0 ||
		s.ETASeconds == nil || *s.ETASeconds != 0 || len(s.Members) != 0 {
		t.Errorf("capture group: %s on %s, committed %d, end %d (%d shards), lag %d, eta %v, members %+v",
			s.Group, s.Topic, s.Committed, s.End, shards, s.Lag, s.ETASeconds, s.Members)
	}
	if len(s.Instances) != 1 || s.Instances[0].State != topics.StatusStopped {
		t.Errorf("capture instances %+v, want one, stopped", s.Instances)
	}
	// Every announcement finished once at least (captured or already complete); every row's tokens captured.
	if s.Records < s.End || s.Rejected != 0 || s.Tokens < tokens {
		t.Errorf("capture figures: %d records (%d announcements), %d rejected, %d tokens (the shards hold %d)",
			s.Records, s.End, s.Rejected, s.Tokens, tokens)
	}
	for _, w := range r.Warnings {
		t.Errorf("warning after a clean run: %s", w)
	}
	var text bytes.Buffer
	if err := status.Render(&text, r); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`\ncapture +draftflow-capture +shard-files +\d+ +\d+ +0 `).MatchString(text.String()) {
		t.Errorf("no capture row in:\n%s", text.String())
	}
	t.Logf("status after a run with capture:\n%s", text.String())
}
