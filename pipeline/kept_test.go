package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/offline"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

// wantRow is a row the shards must hold: its ids (prompt then output), origin and finish reason.
type wantRow struct {
	prompt, output []uint32
	origin, finish string
}

// TestRunRowsBroughtIn runs the whole pipeline (embedded stages, the simulator, simulated capture) on a file of
// each kind of row brought in with its output and on conversations to generate, in one run: /generate results
// and pre-tokenized records keep their ids token-exact, conversations under `replies: keep` become one row per
// reply with the ids the chat template gives (EncodeReply), the conversations to generate are generated; every
// row carries its origin, its loss mask zeros then ones, its features; bad lines and rows not of this model are
// dead-lettered and accounted for, and the run ends with nothing lost. The rows then export and count like
// generated ones, and a second run writes nothing again.
func TestRunRowsBroughtIn(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	model, cleanup, err := tokenize.LoadModelOrBundled("")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	vocab := model.Tokenizer.VocabSize()
	results := write("results.jsonl",
		`{"id": "res-a", "input_ids": [11, 12, 13], "output_ids": [14, 15, 16], "meta_info": {"finish_reason": {"type": "length", "length": 3}}}`,
		`{"input_ids": [21, 22], "text": "..", "output_ids": [23], "meta_info": {"id": "rid-b", "finish_reason": {"type": "stop", "matched": 23}}}`,
		fmt.Sprintf(`{"id": "res-oov", "input_ids": [1, 2], "output_ids": [3, %d]}`, vocab), // not this model's ids: tokenize rejects it
	)
	records := write("records.jsonl",
		`{"id": "rec-a", "input_ids": [31, 32, 33, 34], "loss_mask": [0, 0, 1, 1]}`,
		`{"id": "rec-b", "input_ids": [[41, 42, 43, 44, 45, 46]], "loss_mask": [[0, 1, 0, 0, 1, 0]]}`,
		`{"id": "rec-bad", "input_ids": [1, 2], "loss_mask": [0, 2]}`, // ingest rejects it
	)
	chats := write("chats.jsonl",
		`{"id": "chat-a", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is two and two?"}, {"role": "assistant", "content": "Four."}, {"role": "user", "content": "And three and three?"}, {"role": "assistant", "content": "Six.", "reasoning_content": "3+3"}]}`,
		`{"id": "chat-b", "messages": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}]}`,
		`{"id": "chat-none", "messages": [{"role": "user", "content": "Nobody answers this."}]}`, // no reply to keep
	)
	regen := write("regen.jsonl",
		`{"id": "gen-a", "messages": [{"role": "user", "content": "Tell me a story."}]}`,
		`{"id": "gen-b", "messages": [{"role": "user", "content": "Count to ten."}, {"role": "assistant", "content": "1 2 3"}, {"role": "user", "content": "Go on."}]}`,
	)
	settings := write("settings.json", `{"datasets": {"regen": {"replies": "generate"}}}`)

	kc := kafkatest.Config(t, 4)
	out := t.TempDir()
	var rc Config
	rc.Kafka = kc
	rc.Logger = slog.New(slog.DiscardHandler)
	rc.Ingest.Inputs = []string{results, records, chats, regen}
	rc.Ingest.SettingsFile = settings
	rc.Ingest.Replies = ingest.RepliesKeep
	rc.Ingest.Defaults.MaxNewTokens = 64
	rc.Sink.Dir = out
	rc.Sim.Instant = true
	rc.Sim.OutputLenMean = 20
	rc.Capture.Stage.Aux, rc.Capture.Stage.Final = "sim", "sim"
	rc.Capture.SimHidden = 32
	rc.Capture.Stage.AuxLayers = []int{2, 4, 5}
	rc.Capture.Stage.Registerer = prometheus.NewRegistry()
	rc.Timeout = 4 * time.Minute
	res, err := Run(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}

	// What each kept row must be, token for token.
	want := map[string]wantRow{
		"res-a\x000":  {[]uint32{11, 12, 13}, []uint32{14, 15, 16}, topics.OriginResult, "length"},
		"rid-b\x000":  {[]uint32{21, 22}, []uint32{23}, topics.OriginResult, "stop"},
		"rec-a\x000":  {[]uint32{31, 32}, []uint32{33, 34}, topics.OriginRecord, "stop"},
		"rec-b\x000":  {[]uint32{41}, []uint32{42}, topics.OriginRecord, "stop"},
		"rec-b\x001":  {[]uint32{41, 42, 43, 44}, []uint32{45}, topics.OriginRecord, "stop"},
		"chat-a\x000": {},
		"chat-a\x001": {},
		"chat-b\x000": {},
	}
	err = ingest.ReadFile(chats, func(p topics.Prompt, perr error, src topics.Source, raw []byte) error {
		if perr != nil {
			return perr
		}
		for i, m := range slices.Concat(p.Messages, p.Rest) {
			if m.Role != "assistant" {
				continue
			}
			q := p
			q.Messages, q.Rest, q.Dataset = slices.Concat(p.Messages, p.Rest)[:i], nil, "chats"
			q.Sampling.MaxNewTokens = 64
			prompt, output, err := model.EncodeReply(&q, m)
			if err != nil {
				return err
			}
			turn := 0
			for _, h := range q.Messages {
				if h.Role == "assistant" {
					turn++
				}
			}
			want[topics.AccountKey(p.ID, turn, topics.OriginDataset)] = wantRow{prompt, output, topics.OriginDataset, "stop"}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Accounting: every row ingested has an outcome; the bad lines and the row of other ids are rejections.
	if res.Lost != 0 || len(res.Missing) != 0 {
		t.Fatalf("lost %d: %v", res.Lost, res.Missing)
	}
	if res.Prompts != len(want)+1+2 || res.Written != len(want)+2 || res.PipelineRejected != 1 || res.IngestRejected != 2 {
		t.Fatalf("prompts %d (written %d, rejected %d), rejected lines %d; want %d prompts, %d written, 1 and 2",
			res.Prompts, res.Written, res.PipelineRejected, res.IngestRejected, len(want)+3, len(want)+2)
	}
	wantOrigins := map[string]int64{topics.OriginResult: 2, topics.OriginRecord: 3, topics.OriginDataset: 3}
	for o, n := range wantOrigins {
		if res.Origins[o] != n {
			t.Errorf("rows of origin %s: %d, want %d (all: %v)", o, res.Origins[o], n, res.Origins)
		}
	}
	if res.Origins[topics.OriginGenerated] < 2 {
		t.Errorf("%d generated rows, want the two conversations' turns", res.Origins[topics.OriginGenerated])
	}
	if res.FeatureMissing != 0 || res.FeatureRows != res.Rows {
		t.Errorf("features: %d rows with, %d without, of %d rows", res.FeatureRows, res.FeatureMissing, res.Rows)
	}
	var reasons []string
	for _, ex := range res.Examples {
		reasons = append(reasons, ex.Reason)
	}
	joined := strings.Join(reasons, "\n")
	for _, r := range []string{"outside the vocabulary", "loss_mask[1] is 2", "no assistant reply"} {
		if !strings.Contains(joined, r) {
			t.Errorf("no rejection says %q:\n%s", r, joined)
		}
	}

	b, err := os.ReadFile(res.RejectedFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"class":"out_of_vocabulary"`) || !strings.Contains(string(b), `"id":"res-oov","dataset":"results","origin":"result"`) {
		t.Errorf("the rejections file does not name the row of other ids and its origin:\n%s", b)
	}

	// The rows, token-exact.
	runs := shardtest.ReadRows(t, out)
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1 (rows brought in belong to the run's settings)", len(runs))
	}
	seen := map[string]bool{}
	for _, rows := range runs {
		for _, r := range rows {
			if err := r.Validate(false); err != nil {
				t.Errorf("%s turn %d: %v", r.ID, r.Turn, err)
			}
			if r.Origin == topics.OriginGenerated {
				if !strings.HasPrefix(r.ID, "gen-") || r.Endpoint == "" {
					t.Errorf("generated row %s turn %d (endpoint %q)", r.ID, r.Turn, r.Endpoint)
				}
				continue
			}
			key := topics.AccountKey(r.ID, int(r.Turn), r.Origin)
			w, ok := want[key]
			if !ok || seen[key] {
				t.Errorf("unexpected row %s turn %d (%s)", r.ID, r.Turn, r.Origin)
				continue
			}
			seen[key] = true
			ids := make([]int32, 0, len(w.prompt)+len(w.output))
			for _, id := range slices.Concat(w.prompt, w.output) {
				ids = append(ids, int32(id))
			}
			if !slices.Equal(r.InputIDs, ids) || int(r.PromptLen) != len(w.prompt) || r.Origin != w.origin ||
				r.FinishReason != w.finish || r.Endpoint != "" || r.StopReason != topics.StopEnd || r.Dataset == "" {
				t.Errorf("%s turn %d: ids %v prompt_len %d origin %q finish %q endpoint %q stop %q; want ids %v prompt_len %d origin %q finish %q",
					r.ID, r.Turn, r.InputIDs, r.PromptLen, r.Origin, r.FinishReason, r.Endpoint, r.StopReason, ids, len(w.prompt), w.origin, w.finish)
			}
		}
	}
	for key := range want {
		if !seen[key] {
			t.Errorf("no row %q", strings.ReplaceAll(key, "\x00", " turn "))
		}
	}

	// The shards read back like generated ones: inspect counts by origin, exports take them.
	var rep bytes.Buffer
	sum, err := offline.Inspect(context.Background(), out, &rep)
	if err != nil {
		t.Fatalf("%v\n%s", err, rep.String())
	}
	if !strings.Contains(rep.String(), "result=2 record=3 dataset=3") {
		t.Errorf("inspect does not count rows by origin:\n%s", rep.String())
	}
	var export bytes.Buffer
	if _, err := offline.Export(context.Background(), out, offline.ExportOptions{Format: offline.FormatSpecForge}, &export); err != nil {
		t.Fatal(err)
	}
	if n := countExported(t, &export, "rec-b", [][]uint8{{0, 1}, {0, 0, 0, 0, 1}}); n != int(sum.Rows) {
		t.Errorf("%d rows exported, %d in the shards", n, sum.Rows)
	}
	rd, _ := shard.RunDirs(out)
	if m, err := shard.ReadManifest(rd[0]); err != nil || m.Origins[topics.OriginRecord] != 3 {
		t.Errorf("manifest origins %v (%v)", m.Origins, err)
	}

	// Again into the same output: every row is there already.
	rc.Capture.Stage.Registerer = prometheus.NewRegistry()
	again, err := Run(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	if again.Written != 0 || again.Lost != 0 || again.AlreadyPresent != len(want)+2 || again.Rows != res.Rows {
		t.Fatalf("second run: written %d, lost %d, already present %d (want %d), rows %d (was %d)",
			again.Written, again.Lost, again.AlreadyPresent, len(want)+2, again.Rows, res.Rows)
	}
}

// countExported counts the JSON lines of a SpecForge export, checking that the rows of id hold the loss masks
// want (a record whose rows were split from one mask), in some order.
func countExported(t *testing.T, r io.Reader, id string, want [][]uint8) int {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	n := 0
	var masks [][]uint8
	for sc.Scan() {
		var row struct {
			ID       string  `json:"id"`
			LossMask []uint8 `json:"loss_mask"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		if row.ID == id {
			masks = append(masks, row.LossMask)
		}
		n++
	}
	for _, w := range want {
		if !slices.ContainsFunc(masks, func(m []uint8) bool { return slices.Equal(m, w) }) || len(masks) != len(want) {
			t.Errorf("exported masks of %s: %v, want %v", id, masks, want)
			break
		}
	}
	return n
}
