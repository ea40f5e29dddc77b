package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/internal/durable"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/features"
	"github.com/draftflow/draftflow/sink"
	capturestage "github.com/draftflow/draftflow/stages/capture"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

const captureTestHidden = 32

var captureTestLayers = []int{2, 4, 5}

// captureSims serves an aux and a final simulated capture server (context window ctxLen for the final one,
// 0: the model's) through handlers that count requests and call onRequest (when set) before each.
func captureSims(t *testing.T, finalCtx int, onRequest func(n int64)) (aux, final string) {
	t.Helper()
	model, cleanup, err := tokenize.LoadModelOrBundled("")
	t.Cleanup(cleanup)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	for _, mode := range []string{sim.HiddenAux, sim.HiddenFinal} {
		scfg := sim.Config{Instant: true, HiddenStates: mode, HiddenSize: captureTestHidden, AuxLayers: captureTestLayers,
			DisableRadixCache: true, Logger: slog.New(slog.DiscardHandler), VocabSize: model.Tokenizer.VocabSize(), EOSTokenIDs: []int{0},
			ContextLength: 1 << 20}
		if mode == sim.HiddenFinal && finalCtx > 0 {
			scfg.ContextLength = finalCtx
		}
		s, err := sim.New(scfg)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if onRequest != nil {
				onRequest(n.Add(1))
			}
			s.ServeHTTP(w, r)
		}))
		t.Cleanup(func() { ts.Close(); s.Close() })
		if mode == sim.HiddenAux {
			aux = ts.URL
		} else {
			final = ts.URL
		}
	}
	return aux, final
}

// checkFeatures checks every shard under out: one complete feature file (features.Check against the shard's
// rows) listed in features.json with its checksum, each captured row's values exactly the simulator's
// (sim.HiddenValue of its token and position in each layer: bf16-exact), and returns the missing rows.
func checkFeatures(t *testing.T, out string) []features.MissingRow {
	t.Helper()
	runs, err := shard.RunDirs(out)
	if err != nil || len(runs) == 0 {
		t.Fatalf("runs under %s: %v %v", out, runs, err)
	}
	var missing []features.MissingRow
	shards := 0
	for _, rd := range runs {
		m, err := shard.ReadManifest(rd)
		if err != nil {
			t.Fatal(err)
		}
		fm, err := features.ReadManifest(rd)
		if err != nil || fm == nil {
			t.Fatalf("%s: features.json: %v", rd, err)
		}
		if len(fm.Files) != len(m.Shards) {
			t.Errorf("%s: features.json lists %d files, the run has %d shards", rd, len(fm.Files), len(m.Shards))
		}
		listed := map[string]features.FileEntry{}
		for _, e := range fm.Files {
			listed[e.Shard] = e
		}
		ents, _ := os.ReadDir(rd)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".tmp") && strings.Contains(e.Name(), features.Ext) {
				t.Errorf("%s: an unfinished feature file is left: %s", rd, e.Name())
			}
		}
		for _, sh := range m.Shards {
			shards++
			path := filepath.Join(rd, sh.File)
			var refs []features.RowRef
			var ids [][]int32
			if err := shard.ScanFile(context.Background(), path, nil, func(r *shard.Row) error {
				refs = append(refs, features.RowRef{ID: r.ID, Turn: int(r.Turn), Tokens: len(r.InputIDs)})
				ids = append(ids, append([]int32(nil), r.InputIDs...))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			fp := features.PathFor(path)
			f, err := features.Open(fp)
			if err != nil {
				t.Fatalf("shard %s: %v", sh.File, err)
			}
			want := features.Header{Hidden: captureTestHidden, Layers: []string{"aux:2", "aux:4", "aux:5", "final"}}
			if err := features.Check(f, refs, want); err != nil {
				t.Errorf("%s: %v", fp, err)
			}
			e, ok := listed[sh.File]
			digest, size, _ := durable.FileSHA256(fp)
			if !ok || e.SHA256 != digest || e.Bytes != size || e.Rows != len(f.Index.Rows) || e.Missing != len(f.Index.Missing) {
				t.Errorf("%s: features.json entry %+v, the file: %d bytes sha256 %s, %d rows, %d missing", fp, e, size, digest, len(f.Index.Rows), len(f.Index.Missing))
			}
			for i, ri := range f.Index.Rows {
				vals, err := f.ReadFloat32(i)
				if err != nil {
					t.Fatal(err)
				}
				w := 4 * captureTestHidden
				for pos := 0; pos < ri.Tokens; pos++ {
					tok := ids[ri.Row][pos]
					for l := 0; l < 4; l++ {
						for c := 0; c < captureTestHidden; c++ {
							if got, want := vals[pos*w+l*captureTestHidden+c], sim.HiddenValue(tok, pos, l, c); got != want {
								t.Fatalf("%s row %s position %d layer %d column %d: %v, want %v", fp, ri.ID, pos, l, c, got, want)
							}
						}
					}
				}
			}
			missing = append(missing, f.Index.Missing...)
			f.Close()
		}
	}
	if shards < 3 {
		t.Fatalf("only %d shards: the test wants several", shards)
	}
	return missing
}

// runCaptureUntil runs the capture stage on out until every shard has its feature file (announcing them all
// first), or until stopAfter requests when stopAfter > 0 (a kill mid-shard), and returns the stage's error.
func runCaptureUntil(t *testing.T, kc kafka.Config, out, aux, final string, stop <-chan struct{}) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kcl := kafkatest.Client(t, kc)
	if _, err := sink.AnnounceShards(ctx, kcl, out); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	runs, _ := shard.RunDirs(out)
	for _, rd := range runs {
		m, _ := shard.ReadManifest(rd)
		for _, sh := range m.Shards {
			want[filepath.Join(rd, sh.File)] = true
		}
	}
	var mu sync.Mutex
	cfg := capturestage.Config{Client: kcl, Dir: out, Aux: aux, Final: final, AuxLayers: captureTestLayers, Concurrency: 3,
		Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
		OnShard: func(p string) {
			mu.Lock()
			delete(want, p)
			if len(want) == 0 {
				cancel()
			}
			mu.Unlock()
		}}
	if stop != nil {
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	err := capturestage.Run(ctx, cfg)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// TestPipelineCaptureExactlyOnce: `draftflow run --capture-aux sim --capture-final sim` writes one complete
// feature file per shard with the simulator's exact values; then the capture stage is killed mid-shard (its
// context ends between requests) with one file deleted, one truncated and a torn .tmp beside a third, and
// restarted: every shard again has exactly one complete file with the right rows, the files that were
// complete are not written again (same file, same modification time), and no row is generated again (the
// shards are unchanged).
func TestPipelineCaptureExactlyOnce(t *testing.T) {
	kc := kafkatest.Config(t, 4)
	out := t.TempDir()
	rc := simRun(kc, out, sampleFile)
	rc.Ingest.Defaults.MaxNewTokens = 64
	rc.Sink.RotateRows = 10
	rc.Sim.OutputLenMean = 40
	rc.Timeout = 5 * time.Minute
	rc.Ingest.Turns = "" // every turn: a shard may hold several turns of one conversation
	simCapture(&rc, prometheus.NewRegistry())
	res, err := pipeline.Run(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	if res.Lost > 0 {
		t.Fatalf("lost %d prompts", res.Lost)
	}
	if missing := checkFeatures(t, out); len(missing) != 0 {
		t.Fatalf("rows without features: %+v", missing)
	}
	if _, err := offline.Inspect(context.Background(), out, os.Stderr); err != nil {
		t.Fatal(err)
	}

	// The shards and the feature files as they are now.
	type fileState struct {
		info os.FileInfo
		sum  string
	}
	before := map[string]fileState{}
	var featPaths []string
	runs, _ := shard.RunDirs(out)
	for _, rd := range runs {
		m, _ := shard.ReadManifest(rd)
		for _, sh := range m.Shards {
			for _, p := range []string{filepath.Join(rd, sh.File), features.PathFor(filepath.Join(rd, sh.File))} {
				st, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				sum, _, _ := durable.FileSHA256(p)
				before[p] = fileState{st, sum}
			}
			featPaths = append(featPaths, features.PathFor(filepath.Join(rd, sh.File)))
		}
	}
	// A deleted file, a truncated one (a copy of half its bytes: no closing magic), a torn .tmp of a third.
	deleted, truncated, torn := featPaths[0], featPaths[1], featPaths[2]
	if err := os.Remove(deleted); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(truncated)
	if err := os.WriteFile(truncated, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(torn+".tmp", b[:len(b)/3], 0o644); err != nil {
		t.Fatal(err)
	}
	// Killed after a few requests: mid-shard.
	stop := make(chan struct{})
	var once sync.Once
	aux, final := captureSims(t, 0, func(n int64) {
		if n == 5 {
			once.Do(func() { close(stop) })
		}
	})
	if err := runCaptureUntil(t, kc, out, aux, final, stop); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{deleted, truncated} {
		if f, err := features.Open(p); err == nil {
			f.Close() // complete already (the kill came after it): fine; a half file is not
		} else if _, serr := os.Stat(p); serr == nil && p == deleted {
			t.Errorf("%s exists but does not open after the kill: %v", p, err)
		}
	}
	// Restarted: runs until every shard is done.
	if err := runCaptureUntil(t, kc, out, aux, final, nil); err != nil {
		t.Fatal(err)
	}
	if missing := checkFeatures(t, out); len(missing) != 0 {
		t.Fatalf("rows without features: %+v", missing)
	}
	for p, was := range before {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		sum, _, _ := durable.FileSHA256(p)
		switch p {
		case deleted, truncated:
			if sum != was.sum {
				t.Errorf("%s was captured again with other contents", p)
			}
		default:
			if !os.SameFile(st, was.info) || !st.ModTime().Equal(was.info.ModTime()) || sum != was.sum {
				t.Errorf("%s was written again although it was complete (or is a shard: generated again)", p)
			}
		}
	}
	if _, err := os.Stat(torn + ".tmp"); err == nil {
		// The torn .tmp beside a complete file is ignored (the file is skipped); it never counts as features.
		if f, err := features.Open(torn); err != nil {
			t.Errorf("%s: %v", torn, err)
		} else {
			f.Close()
		}
	}
	if _, err := offline.Inspect(context.Background(), out, os.Stderr); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureRejectsRowsOverContext: rows the final server refuses (over its context window) are listed as
// missing in their shard's feature file with the class and the server's reason, dead-lettered on the rejected
// topic naming the row, reported by inspect, and every other row has its features.
func TestCaptureRejectsRowsOverContext(t *testing.T) {
	kc := kafkatest.Config(t, 4)
	out := t.TempDir()
	rc := simRun(kc, out, sampleFile)
	rc.Ingest.Defaults.MaxNewTokens = 64
	rc.Ingest.Turns = ingest.TurnsLast
	rc.Sink.RotateRows = 10
	rc.Sink.AnnounceShards = true
	rc.Sim.OutputLenMean = 40
	rc.Timeout = 5 * time.Minute
	if _, err := pipeline.Run(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	var lens []int
	if err := shard.ScanRows(context.Background(), out, func(r *shard.Row) error {
		lens = append(lens, int(r.PromptLen+r.CompletionLen))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	limit := lens[0]
	over := 0
	for _, n := range lens {
		// SGLang's validate_input_length (the simulator's too): an input of max_req_input_len = context-1-5
		// tokens or more is refused.
		if n >= limit-6 {
			over++
		}
	}
	aux, final := captureSims(t, limit, nil)
	if err := runCaptureUntil(t, kc, out, aux, final, nil); err != nil {
		t.Fatal(err)
	}
	missing := checkFeatures(t, out)
	for _, m := range missing {
		if m.Tokens < limit-6 {
			t.Errorf("missing row %+v under the limit %d", m, limit)
		}
	}
	if len(missing) != over {
		t.Fatalf("%d rows without features, %d rows are at or over the final server's context of %d", len(missing), over, limit)
	}
	for _, m := range missing {
		if m.Tokens < limit-6 || m.Class != capturestage.ClassFailed || !strings.Contains(m.Reason, m.ID) || !strings.Contains(m.Reason, "final server") {
			t.Errorf("missing row %+v: want one of >= %d tokens, class %s, a reason naming the row and the final server", m, limit-6, capturestage.ClassFailed)
		}
	}
	got := captureRejections(t, kc, len(missing))
	for _, m := range missing {
		if !got[m.ID] {
			t.Errorf("row %s has no dead letter of class %s", m.ID, capturestage.ClassFailed)
		}
	}
	var report strings.Builder
	sum, err := offline.Inspect(context.Background(), out, &report)
	if err != nil {
		t.Fatal(err)
	}
	if sum.FeatureRowsMissing != int64(len(missing)) || !strings.Contains(report.String(), "without features") {
		t.Errorf("inspect reports %d rows without features, want %d; report:\n%s", sum.FeatureRowsMissing, len(missing), report.String())
	}
}

// captureRejections reads the rejected topic until it has seen want dead letters of the capture stage (or 30 s
// passed) and returns their ids.
func captureRejections(t *testing.T, kc kafka.Config, want int) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string]bool{}
	c := kafkatest.Client(t, kc).NewConsumer(topics.TopicRejected, kafka.ConsumerConfig{Group: "test-capture-rejections"})
	c.Run(ctx, func(d *kafka.Delivery) {
		var r topics.Rejection
		if err := topics.Unmarshal(d.Message.Value, &r); err == nil && r.Stage == capturestage.Stage && r.Class == capturestage.ClassFailed {
			mu.Lock()
			got[r.ID] = true
			if len(got) >= want {
				cancel()
			}
			mu.Unlock()
		}
		d.Done()
	})
	return got
}

// TestCaptureShardAnnouncedTwice: every shard announced twice (as the sink does when it commits a shard and
// again on its next start, and run's final capture after the run's own), with both announcements of a shard in
// flight at once: each feature file is written once (the second announcement finds it complete), every
// announcement finishes, and the files match features.json.
func TestCaptureShardAnnouncedTwice(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	out := t.TempDir()
	rc := simRun(kc, out, sampleFile)
	rc.Ingest.Defaults.MaxNewTokens = 32
	rc.Ingest.Turns = ingest.TurnsLast
	rc.Sink.RotateRows = 25
	rc.Sim.OutputLenMean = 20
	rc.Timeout = 3 * time.Minute
	if _, err := pipeline.Run(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kcl := kafkatest.Client(t, kc)
	var shards int
	for range 2 {
		n, err := sink.AnnounceShards(ctx, kcl, out)
		if err != nil {
			t.Fatal(err)
		}
		shards = n
	}
	if shards < 4 {
		t.Fatalf("%d shards: the test wants several", shards)
	}
	aux, final := captureSims(t, 0, nil)
	reg := prometheus.NewRegistry()
	var finished atomic.Int64
	cfg := capturestage.Config{Client: kcl, Dir: out, Aux: aux, Final: final, AuxLayers: captureTestLayers, Concurrency: 2,
		Shards:     4 * shards, // every announcement at once: both of a shard are in flight together
		Registerer: reg, Logger: slog.New(slog.DiscardHandler),
		OnShard: func(string) {
			if finished.Add(1) == int64(2*shards) {
				cancel()
			}
		}}
	if err := capturestage.Run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if n := finished.Load(); n != int64(2*shards) {
		t.Fatalf("%d announcements finished, want %d (each of %d shards twice)", n, 2*shards, shards)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	written := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "draftflow_capture_files_total" {
			written = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if written != float64(shards) {
		t.Errorf("%v feature files written for %d shards announced twice, want each written once", written, shards)
	}
	if missing := checkFeatures(t, out); len(missing) != 0 {
		t.Fatalf("rows without features: %+v", missing)
	}
	if _, err := offline.Inspect(context.Background(), out, os.Stderr); err != nil {
		t.Fatal(err)
	}
}

// simCapture turns on the capture stage of rc against the simulator (both server modes), at the test width and
// layers, its metrics in reg.
func simCapture(rc *pipeline.Config, reg prometheus.Registerer) {
	rc.Capture.Stage.Aux, rc.Capture.Stage.Final = "sim", "sim"
	rc.Capture.SimHidden = captureTestHidden
	rc.Capture.Stage.AuxLayers = captureTestLayers
	rc.Capture.Stage.Registerer = reg
}
