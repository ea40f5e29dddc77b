package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka/kafkatest"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/metrics/metricstest"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/topics"
)

func startKafka(t *testing.T) kafka.Config {
	t.Helper()
	return kafkatest.Cluster(t, kafka.Config{Partitions: 3, Logger: slog.New(slog.DiscardHandler)})
}

// consume reads every record of topic (its size is measured first) in a fresh consumer group.
func consume[T any](t *testing.T, kc kafka.Config, topic string) []*T {
	t.Helper()
	want := kafkatest.Size(t, kc, topic)
	if want == 0 {
		return nil
	}
	out := kafkatest.Collect[T](t, kc, topic, want, 60*time.Second)
	if len(out) != want {
		t.Fatalf("read %d of the %d records on %s", len(out), want, topic)
	}
	return out
}

// recordedProgress is a Progress that records what it was told.
type recordedProgress struct {
	begun, ended int   // calls of Begin and End
	total, read  int64 // Begin's total; the sum of Read
	ok           bool  // End's argument
	readBefore   int64 // bytes reported before Begin (must stay 0)
}

func (p *recordedProgress) Begin(total int64) { p.begun++; p.total = total }
func (p *recordedProgress) Read(n int64) {
	if p.begun == 0 {
		p.readBefore += n
	}
	p.read += n
}
func (p *recordedProgress) End(ok bool) { p.ended++; p.ok = ok }

func TestRunSample(t *testing.T) {
	kc := startKafka(t)
	exp := loadExpected(t)
	settings := filepath.Join(t.TempDir(), "settings.json")
	os.WriteFile(settings, []byte(`{"default": {"max_new_tokens": 512},
		"datasets": {"conversations": {"lane": "long", "temperature": 0.7, "template_kwargs": {"enable_thinking": false}}}}`), 0o644)
	var progress recordedProgress
	cfg := Config{Client: kafkatest.Client(t, kc), Inputs: []string{samplePath}, SettingsFile: settings,
		Defaults: topics.Sampling{TopP: 0.9, MaxNewTokens: 100}, Logger: slog.New(slog.DiscardHandler), Progress: &progress,
		Registerer: prometheus.NewRegistry()}
	ids := collectIDs(&cfg)
	before := recordsCounted(t, cfg.Registerer, stream.Rejected, string(ReasonUnknownRole))
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Prompts != exp.Valid || res.Rejected != len(exp.MalformedLines) || res.Datasets["conversations"] != exp.Valid {
		t.Fatalf("result %d prompts, %d rejected, datasets %v; want %d and %d", res.Prompts, res.Rejected, res.Datasets,
			exp.Valid, len(exp.MalformedLines))
	}
	if strings.Join(ids(), ",") != strings.Join(exp.IDs, ",") {
		t.Fatal("acknowledged ids differ from expected.json (in input order)")
	}
	if got := recordsCounted(t, cfg.Registerer, stream.Rejected, string(ReasonUnknownRole)) - before; got != 1 {
		t.Errorf("draftflow_records_total{stage=ingest,result=rejected,class=unknown_role} rose by %v, want 1", got)
	}
	if got := recordsCounted(t, cfg.Registerer, resultIngested, ""); got != float64(exp.Valid) {
		t.Errorf("draftflow_records_total{stage=ingest,result=ingested} = %v, want %d", got, exp.Valid)
	}
	st, err := os.Stat(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	if want := (recordedProgress{begun: 1, total: st.Size(), read: st.Size(), ended: 1, ok: true}); progress != want {
		t.Errorf("progress %+v, want %+v (the input file is %d bytes)", progress, want, st.Size())
	}

	// Every valid line is on prompts exactly once, with its settings and source line.
	prompts := consume[topics.Prompt](t, kc, topics.TopicPrompts)
	byID := map[string]*topics.Prompt{}
	for _, p := range prompts {
		if _, dup := byID[p.ID]; dup {
			t.Errorf("id %s on prompts twice", p.ID)
		}
		byID[p.ID] = p
	}
	for i, id := range exp.IDs {
		p, ok := byID[id]
		if !ok {
			t.Errorf("valid id %s (%d-th) missing from prompts", id, i)
			continue
		}
		s := p.Sampling
		if s.MaxNewTokens != 512 || s.Lane != "long" || s.Temperature == nil || *s.Temperature != 0.7 || s.TopP != 0.9 ||
			s.TemplateKwargs["enable_thinking"] != false {
			t.Fatalf("%s: sampling %+v", id, s)
		}
		if p.Dataset != "conversations" || p.Source.File != samplePath || p.Source.Line < 1 {
			t.Fatalf("%s: dataset %q source %+v", id, p.Dataset, p.Source)
		}
		if last := p.Messages[len(p.Messages)-1]; last.Role != "user" {
			t.Fatalf("%s: prompt ends with %s", id, last.Role)
		}
	}
	if len(byID) != exp.Valid {
		t.Errorf("%d distinct prompts, want %d", len(byID), exp.Valid)
	}

	// Every malformed line is on rejected, with file, line and reason.
	rejected := consume[topics.Rejection](t, kc, topics.TopicRejected)
	var lines []int64
	reasons := map[int64]string{}
	for _, r := range rejected {
		if r.Stage != Stage || r.Source.File != samplePath || r.Reason == "" || len(r.Payload) == 0 {
			t.Errorf("rejection %+v", r)
		}
		lines = append(lines, r.Source.Line)
		reasons[r.Source.Line] = r.Reason
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i] < lines[j] })
	if fmt.Sprint(lines) != fmt.Sprint(exp.MalformedLines) {
		t.Errorf("rejected lines %v, want %v", lines, exp.MalformedLines)
	}
	if !strings.Contains(reasons[58], `unknown role "wizard"`) || !strings.Contains(reasons[170], "invalid UTF-8") {
		t.Errorf("reasons %v", reasons)
	}

	// A second run sends the same ids again (the sink deduplicates), nothing new.
	cfg2 := Config{Client: kafkatest.Client(t, kc), Inputs: []string{samplePath}, Logger: slog.New(slog.DiscardHandler)}
	ids2 := collectIDs(&cfg2)
	if _, err := Run(context.Background(), cfg2); err != nil {
		t.Fatal(err)
	}
	if strings.Join(ids2(), ",") != strings.Join(exp.IDs, ",") {
		t.Error("second run produced different ids")
	}
	if n := kafkatest.Size(t, kc, topics.TopicPrompts); n != 2*exp.Valid {
		t.Errorf("prompts holds %d records after two runs, want %d", n, 2*exp.Valid)
	}
}

func TestRunDuplicatesDatasetAndBadFiles(t *testing.T) {
	kc := startKafka(t)
	dir := t.TempDir()
	a := filepath.Join(dir, "a.jsonl")
	b := filepath.Join(dir, "b.jsonl")
	os.WriteFile(a, []byte(userLine("x", "1")+"\n"+userLine("y", "2")+"\n"+userLine("x", "3")+"\n"), 0o644)
	os.WriteFile(b, []byte(userLine("y", "4")+"\n"+userLine("z", "5")+"\n"+"{oops\n"), 0o644)
	seed := int64(9)
	cfg := Config{Client: kafkatest.Client(t, kc), Inputs: []string{dir}, Dataset: "merged",
		Defaults: topics.Sampling{Seed: &seed}, Logger: slog.New(slog.DiscardHandler)}
	ids := collectIDs(&cfg)
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ids(), ",") != "x,y,z" || res.Rejected != 3 || res.Datasets["merged"] != 3 ||
		res.Reasons[ReasonDuplicateID] != 2 || res.Reasons[ReasonInvalidJSON] != 1 {
		t.Fatalf("result %+v", res)
	}
	rejected := consume[topics.Rejection](t, kc, topics.TopicRejected)
	got := map[string]string{}
	for _, r := range rejected {
		got[fmt.Sprintf("%s:%d", filepath.Base(r.Source.File), r.Source.Line)] = r.Reason
	}
	if !strings.Contains(got["a.jsonl:3"], `duplicate id "x": already used by `+a+" line 1") ||
		!strings.Contains(got["b.jsonl:1"], `duplicate id "y"`) || !strings.Contains(got["b.jsonl:3"], "invalid JSON") {
		t.Errorf("rejections %v", got)
	}
	prompts := consume[topics.Prompt](t, kc, topics.TopicPrompts)
	if len(prompts) != 3 {
		t.Fatalf("%d prompts on the topic, want 3 (x, y, z)", len(prompts))
	}
	for _, p := range prompts {
		if p.Dataset != "merged" || p.Sampling.Seed == nil || *p.Sampling.Seed != 9 {
			t.Errorf("prompt %+v", p)
		}
	}

	// Configuration errors fail before anything is written.
	for name, cfg := range map[string]Config{
		"no inputs":   {Client: kafkatest.Client(t, kc)},
		"missing":     {Client: kafkatest.Client(t, kc), Inputs: []string{filepath.Join(dir, "nope.jsonl")}},
		"no brokers":  {Inputs: []string{a}},
		"bad setting": {Client: kafkatest.Client(t, kc), Inputs: []string{a}, SettingsFile: a},
	} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestRunCancelled(t *testing.T) {
	kc := startKafka(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{Client: kafkatest.Client(t, kc), Inputs: []string{samplePath}, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		t.Fatal("cancelled run returned no error")
	}
}

// recordsCounted returns draftflow_records_total{stage="ingest", result, class} of reg (a *prometheus.Registry).
func recordsCounted(t *testing.T, reg prometheus.Registerer, result, class string) float64 {
	t.Helper()
	return metricstest.Counter(t, reg.(*prometheus.Registry), "draftflow_records_total",
		map[string]string{"stage": Stage, "result": result, "class": class})
}

// A prompt the broker refuses (the existing prompts topic accepts less than ingest's writers send) is
// dead-lettered as too_large with the sizes, and the run goes on and succeeds.
func TestRunRejectsPromptRefusedByBroker(t *testing.T) {
	kc := startKafka(t)
	small := kc
	small.MaxMessageBytes = 16 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := kafkatest.Client(t, small).Admin().EnsureTopics(ctx, topics.TopicPrompts); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	text := make([]byte, 40000) // random letters: zstd leaves well over 16 KiB
	for i := range text {
		text[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[r.IntN(36)]
	}
	input := filepath.Join(t.TempDir(), "big.jsonl")
	lines := fmt.Sprintf(`{"id": "huge", "messages": [{"role": "user", "content": %q}]}`+"\n"+
		`{"id": "small", "messages": [{"role": "user", "content": "hi"}]}`+"\n", text)
	if err := os.WriteFile(input, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Client: kafkatest.Client(t, kc), Inputs: []string{input}, Logger: slog.New(slog.DiscardHandler)}
	ids := collectIDs(&cfg)
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Prompts != 1 || fmt.Sprint(ids()) != "[small]" || res.Rejected != 1 || res.Reasons[ReasonTooLarge] != 1 {
		t.Fatalf("result %d prompts %v, %d rejected %v; want small written and huge rejected", res.Prompts, ids(), res.Rejected, res.Reasons)
	}
	rejected := consume[topics.Rejection](t, kc, topics.TopicRejected)
	if len(rejected) != 1 {
		t.Fatalf("%d rejections", len(rejected))
	}
	rej := rejected[0]
	if rej.ID != "huge" || rej.Stage != Stage || rej.Source.File != input || rej.Source.Line != 1 ||
		!strings.Contains(rej.Reason, " bytes; the broker refused it") || !strings.Contains(rej.Reason, "16384-byte max.message.bytes") {
		t.Errorf("rejection %+v", rej)
	}
}

// TestRunBadInputCorpus feeds ingest a corpus of bad input beside good lines: broken lines of every kind in a
// JSONL file, a truncated gzip file, a zstd file of garbage, a Parquet file without a conversation column and
// one whose data is corrupt (arrow panics reading it). Every good line is produced, every bad line or
// unreadable rest of a file is one rejection naming its file, line and reason, and the run ends without error.
func TestRunBadInputCorpus(t *testing.T) {
	kc := startKafka(t)
	dir := t.TempDir()
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	huge := strings.Repeat("x", 2<<20)
	write("lines.jsonl", []byte(strings.Join([]string{
		userLine("ok1", "hello"),
		`{"id": "t1", "messages": [{"role": "user", "content": "trunc`,                              // 2 truncated JSON
		`{"id": "t2", "messages": {"role": "user", "content": "x"}}`,                                // 3 wrong type
		`{"id": "t3", "messages": [{"role": "wizard", "content": "x"}]}`,                            // 4 unknown role
		`{"id": "t4", "messages": []}`,                                                              // 5 empty
		userLine("big", huge),                                                                       // 6 over the line limit
		"{\"id\": \"t5\", \"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}",         // 7 invalid UTF-8
		"{\"id\": \"t6\", \"messages\": [{\"role\": \"user\", \"content\": \"a\x00b\"}]}",           // 8 raw NUL
		userLine("ok1", "other content, same id"),                                                   // 9 duplicate id
		`{"id": "ok2", "messages": [{"role": "user", "content": "an escaped NUL \u0000 is text"}]}`, // 10 fine
	}, "\n")+"\n"))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	for i := range 200 {
		fmt.Fprintln(zw, userLine(fmt.Sprintf("gz%d", i), strings.Repeat("words ", 50)))
	}
	zw.Close()
	write("truncated.jsonl.gz", gz.Bytes()[:gz.Len()/2])
	write("garbage.jsonl.zst", bytes.Repeat([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x99}, 40))
	write("corrupt.parquet", func() []byte {
		b := parquetSeed(t)
		b[len(b)/3] ^= 0x5a
		return b
	}())
	mem := memory.NewGoAllocator()
	schema := arrow.NewSchema([]arrow.Field{{Name: "text", Type: arrow.BinaryTypes.String}}, nil)
	rb := array.NewRecordBuilder(mem, schema)
	rb.Field(0).(*array.StringBuilder).Append("not a conversation")
	rec := rb.NewRecord()
	writeParquet(t, filepath.Join(dir, "wrong.parquet"), rec, 1)
	rec.Release()
	rb.Release()
	write("zz-last.jsonl", []byte(userLine("last", "still read after the bad files")+"\n"))

	cfg := Config{Client: kafkatest.Client(t, kc), Inputs: []string{dir}, MaxLineBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)}
	ids := collectIDs(&cfg)
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("a bad input stopped the run: %v", err)
	}
	got := ids()
	sort.Strings(got)
	for _, want := range []string{"ok1", "ok2", "last", "gz0"} {
		if !slices.Contains(got, want) {
			t.Errorf("good line %q not produced (produced %d: %.200v)", want, len(got), got)
		}
	}
	want := map[string]Reason{
		"lines.jsonl:2": ReasonInvalidJSON, "lines.jsonl:3": ReasonBadField, "lines.jsonl:4": ReasonUnknownRole,
		"lines.jsonl:5": ReasonEmptyConversation, "lines.jsonl:6": ReasonLineTooLong, "lines.jsonl:7": ReasonInvalidUTF8,
		"lines.jsonl:8": ReasonInvalidJSON, "lines.jsonl:9": ReasonDuplicateID,
		"garbage.jsonl.zst:1": ReasonCorruptFile, "corrupt.parquet:?": ReasonCorruptFile,
		"wrong.parquet:1": ReasonWrongSchema, "truncated.jsonl.gz:?": ReasonCorruptFile,
	}
	rejected := consume[topics.Rejection](t, kc, topics.TopicRejected)
	if len(rejected) != len(want) || res.Rejected != len(want) {
		t.Errorf("%d rejections on the topic, %d in the result; want %d", len(rejected), res.Rejected, len(want))
	}
	for _, r := range rejected {
		key := fmt.Sprintf("%s:%d", filepath.Base(r.Source.File), r.Source.Line)
		if strings.HasSuffix(r.Source.File, ".gz") || strings.HasSuffix(r.Source.File, "corrupt.parquet") {
			key = filepath.Base(r.Source.File) + ":?" // where reading stops depends on the damage
			if r.Source.Line < 1 {
				t.Errorf("%s: line %d", r.Source.File, r.Source.Line)
			}
		}
		reason, ok := want[key]
		if !ok {
			t.Errorf("unexpected rejection %s: %s", key, r.Reason)
			continue
		}
		if r.Stage != Stage || r.Reason == "" || !strings.Contains(r.Reason, string(reason)) && res.Reasons[reason] == 0 {
			t.Errorf("%s: stage %q reason %q, want %s", key, r.Stage, r.Reason, reason)
		}
		delete(want, key)
	}
	if len(want) > 0 {
		t.Errorf("no rejection for %v", want)
	}
	for reason, n := range res.Reasons {
		if n == 0 {
			t.Errorf("reason %s counted 0", reason)
		}
	}
	if res.Reasons[ReasonCorruptFile] != 3 || res.Reasons[ReasonWrongSchema] != 1 {
		t.Errorf("reasons %v", res.Reasons)
	}
}
