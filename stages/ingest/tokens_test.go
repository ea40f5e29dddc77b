package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/topics"
)

func mustRows(t *testing.T, line string) []topics.Prompt {
	t.Helper()
	ps, err := ParseRows("f.jsonl", 4, []byte(line), "ds")
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return ps
}

// A line with input_ids and output_ids is a /generate result, kept as it is: its id (or SGLang's request id, or
// a hash of its ids), turn and finish reason as the result gives them.
func TestParseResults(t *testing.T) {
	for _, c := range []struct {
		line        string
		id          string
		turn        int
		finish      string
		input, outp []uint32
	}{
		{`{"id": "a", "input_ids": [1, 2, 3], "output_ids": [4, 5]}`, "a", 0, "", []uint32{1, 2, 3}, []uint32{4, 5}},
		{`{"id": 7, "turn": 2, "input_ids": [1], "output_ids": [4294967295], "finish_reason": "length"}`, "7", 2, "length", []uint32{1}, []uint32{4294967295}},
		// SGLang's /generate answer, the prompt's ids beside it (the reference regeneration's raw_responses.jsonl).
		{`{"input_ids": [10, 11], "text": "hi", "output_ids": [12, 2], "meta_info": {"id": "rid-9", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 2}}`,
			"rid-9", 0, "stop", []uint32{10, 11}, []uint32{12, 2}},
		{`{"id": "w", "input_ids": [[1, 2]], "output_ids": [[3]], "meta_info": {"finish_reason": {"type": "length", "length": 1}}}`, "w", 0, "length", []uint32{1, 2}, []uint32{3}},
		{`{"id": "m", "input_ids": [1], "output_ids": [3], "metadata": {"finish_reason": "stop"}}`, "m", 0, "stop", []uint32{1}, []uint32{3}},
	} {
		ps := mustRows(t, c.line)
		if len(ps) != 1 {
			t.Fatalf("%s: %d rows", c.line, len(ps))
		}
		p := ps[0]
		if p.ID != c.id || p.Turn != c.turn || p.FinishReason != c.finish || p.Origin != topics.OriginResult ||
			!slices.Equal(p.InputIDs, c.input) || !slices.Equal(p.OutputIDs, c.outp) || p.Dataset != "ds" ||
			p.Source != (topics.Source{File: "f.jsonl", Line: 4}) || len(p.Messages) != 0 {
			t.Errorf("%s: %+v", c.line, p)
		}
	}
	a := mustRows(t, `{"input_ids": [1, 2], "output_ids": [3]}`)[0]
	b := mustRows(t, `{"output_ids": [3], "input_ids": [1,2], "text": "x"}`)[0]
	c := mustRows(t, `{"input_ids": [1, 2], "loss_mask": [0, 1]}`)[0]
	if !strings.HasPrefix(a.ID, HashIDPrefix) || a.ID != b.ID || a.ID != TokenRowID([]uint32{1, 2}, []uint32{3}, nil) || c.ID == a.ID {
		t.Errorf("content ids: %q %q %q", a.ID, b.ID, c.ID)
	}
	if _, err := ParseAll("f", 1, []byte(`{"input_ids": [1], "output_ids": [2]}`), "ds"); err == nil {
		t.Error("ParseAll took a row of token ids for a conversation")
	}
}

// A line with input_ids and loss_mask is a pre-tokenized record: one row per run of ones, its prompt every id
// before the run; masked-out ids after the last run are dropped; the finish reason is the last row's.
func TestParseRecords(t *testing.T) {
	ps := mustRows(t, `{"id": "one", "input_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1]}`)
	if len(ps) != 1 || ps[0].Origin != topics.OriginRecord || !slices.Equal(ps[0].InputIDs, []uint32{5, 6}) ||
		!slices.Equal(ps[0].OutputIDs, []uint32{7, 8}) || ps[0].Turn != 0 {
		t.Fatalf("one run: %+v", ps)
	}
	ps = mustRows(t, `{"id": "multi", "turn": 1, "input_ids": [[1, 2, 3, 4, 5, 6, 7, 8, 9]], "loss_mask": [[0, 1, 1, 0, 0, 1, 0, 1, 0]], "finish_reason": "length"}`)
	want := []struct {
		turn        int
		input, outp []uint32
		finish      string
	}{
		{1, []uint32{1}, []uint32{2, 3}, ""},
		{2, []uint32{1, 2, 3, 4, 5}, []uint32{6}, ""},
		{3, []uint32{1, 2, 3, 4, 5, 6, 7}, []uint32{8}, "length"},
	}
	if len(ps) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(ps), len(want), ps)
	}
	for i, w := range want {
		p := ps[i]
		if p.ID != "multi" || p.Turn != w.turn || !slices.Equal(p.InputIDs, w.input) || !slices.Equal(p.OutputIDs, w.outp) ||
			p.FinishReason != w.finish || p.Origin != topics.OriginRecord {
			t.Errorf("row %d: %+v, want %+v", i, p, w)
		}
	}
}

// Lines of token ids that cannot be rows are rejected with a reason that names the field and what is wrong.
func TestParseTokenRowMistakes(t *testing.T) {
	for _, c := range []struct {
		line   string
		reason Reason
		detail string
	}{
		{`{"input_ids": [1]}`, ReasonBadField, `needs "output_ids" (a /generate result) or "loss_mask"`},
		{`{"input_ids": [1], "output_ids": [2], "loss_mask": [1]}`, ReasonBadField, `both "output_ids" and "loss_mask"`},
		{`{"input_ids": "1 2", "output_ids": [2]}`, ReasonBadIDs, `"input_ids" is a string, want a list of token ids`},
		{`{"input_ids": [1, -2], "output_ids": [2]}`, ReasonBadIDs, `input_ids[1] is -2, want a token id`},
		{`{"input_ids": [1], "output_ids": [2.5]}`, ReasonBadIDs, `output_ids[0] is 2.5`},
		{`{"input_ids": [4294967296], "output_ids": [2]}`, ReasonBadIDs, `input_ids[0] is 4294967296`},
		{`{"input_ids": [1], "output_ids": ["7"]}`, ReasonBadIDs, `output_ids[0] is "7"`},
		{`{"input_ids": [[1], [2]], "output_ids": [2]}`, ReasonBadIDs, `holds 2 lists`},
		{`{"input_ids": [], "output_ids": [2]}`, ReasonEmptyIDs, `"input_ids" is empty`},
		{`{"input_ids": [1], "output_ids": []}`, ReasonEmptyIDs, `"output_ids" is empty`},
		{`{"input_ids": [1, 2], "loss_mask": [0]}`, ReasonBadMask, `"loss_mask" has 1 values, "input_ids" 2 ids`},
		{`{"input_ids": [1, 2], "loss_mask": [0, 2]}`, ReasonBadMask, `loss_mask[1] is 2, want 0 or 1`},
		{`{"input_ids": [1, 2], "loss_mask": [0, true]}`, ReasonBadMask, `loss_mask[1] is true`},
		{`{"input_ids": [1, 2], "loss_mask": [0, 0]}`, ReasonBadMask, `has no 1`},
		{`{"input_ids": [1, 2], "loss_mask": [1, 1]}`, ReasonBadMask, `starts with 1`},
		{`{"input_ids": [1, 2], "loss_mask": "01"}`, ReasonBadMask, `"loss_mask" is a string`},
		{`{"input_ids": [1], "output_ids": [2], "turn": -1}`, ReasonBadField, `"turn" is -1`},
		{`{"input_ids": [1], "output_ids": [2], "turn": "1"}`, ReasonBadField, `"turn" is "1"`},
		{`{"input_ids": [1], "output_ids": [2], "meta_info": {"finish_reason": {"type": "abort", "message": "x"}}}`, ReasonAborted, `meta_info.finish_reason is abort`},
		{`{"input_ids": [1], "output_ids": [2], "finish_reason": 3}`, ReasonBadField, `finish_reason is 3`},
		{`{"input_ids": [1], "output_ids": [2], "meta_info": []}`, ReasonBadField, `"meta_info" is a list, want an object`},
		{`{"input_ids": [1], "output_ids": [2], "id": {"x": 1}}`, ReasonBadField, `"id" is a object`},
	} {
		_, err := ParseRows("f", 1, []byte(c.line), "ds")
		var le *LineError
		if !errors.As(err, &le) || le.Reason != c.reason || !strings.Contains(le.Detail, c.detail) {
			t.Errorf("%s: %v (reason %q), want %s containing %q", c.line, err, ReasonOf(err), c.reason, c.detail)
		}
	}
}

// Under `replies: keep` each assistant reply after the first user message is a row: the messages before it are
// its prompt, the reply its output; under `turns: last` only the last reply.
func TestKeptReplies(t *testing.T) {
	p, err := ParseAll("f", 1, []byte(`{"id": "c", "messages": [
		{"role": "system", "content": "s"}, {"role": "assistant", "content": "greeting"},
		{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
		{"role": "user", "content": "q2"}, {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
		{"role": "tool", "content": "42"}, {"role": "assistant", "content": "a3"}, {"role": "user", "content": "unanswered"}]}`), "ds")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := keptReplies(p, false)
	if err != nil {
		t.Fatal(err)
	}
	all := slices.Concat(p.Messages, p.Rest)
	want := []struct{ turn, at int }{{1, 3}, {2, 5}, {3, 7}} // the greeting before the first user message is history only
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		r := rows[i]
		if r.ID != "c" || r.Turn != w.turn || r.Origin != topics.OriginDataset || r.Reply == nil || !reflect.DeepEqual(*r.Reply, all[w.at]) ||
			!reflect.DeepEqual(r.Messages, all[:w.at]) || len(r.Rest) != 0 || r.Continuation {
			t.Errorf("row %d: %+v", i, r)
		}
	}
	last, err := keptReplies(p, true)
	if err != nil || len(last) != 1 || last[0].Turn != 3 || last[0].Reply.Content != "a3" {
		t.Errorf("last only: %+v %v", last, err)
	}
	q, _ := ParseAll("f", 1, []byte(`{"messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "q"}]}`), "ds")
	if _, err := keptReplies(q, false); ReasonOf(err) != ReasonNoReply || !strings.Contains(err.Error(), "2 message(s), roles assistant, user") {
		t.Errorf("no reply to keep: %v", err)
	}
}

func TestSettingsReplies(t *testing.T) {
	s, err := ParseSettings([]byte(`{"default": {"replies": "keep"}, "datasets": {"a": {"replies": "generate"}, "b": {"turns": "last"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for ds, want := range map[string]string{"a": RepliesGenerate, "b": RepliesKeep, "c": RepliesKeep} {
		if got := s.RepliesFor(ds, RepliesGenerate); got != want {
			t.Errorf("RepliesFor(%s) = %s, want %s", ds, got, want)
		}
	}
	if got := (Settings{}).RepliesFor("a", RepliesKeep); got != RepliesKeep {
		t.Errorf("no settings: RepliesFor = %s, want the flag's", got)
	}
	if _, err := ParseSettings([]byte(`{"datasets": {"a": {"replies": "original"}}}`)); err == nil ||
		!strings.Contains(err.Error(), `datasets.a: replies "original": want "generate" or "keep"`) {
		t.Errorf("bad replies value: %v", err)
	}
}

// Run writes each row a line brings as a prompt of its own, accounted for by (id, turn): rows of token ids as they
// are, conversations under `replies: keep` one per reply, the others to generate; a row already seen in the run
// is rejected as a duplicate, a conversation without a reply to keep with the reason.
func TestRunRowsBroughtIn(t *testing.T) {
	kc := startKafka(t)
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	results := write("results.jsonl",
		`{"id": "r1", "input_ids": [1, 2], "output_ids": [3], "meta_info": {"finish_reason": {"type": "length"}}}`,
		`{"id": "r1", "turn": 1, "input_ids": [1, 2, 3, 4], "output_ids": [5]}`,
		`{"id": "r1", "input_ids": [9], "output_ids": [9]}`)
	records := write("records.jsonl", `{"id": "b1", "input_ids": [1, 2, 3, 4], "loss_mask": [0, 1, 0, 1]}`)
	chats := write("chats.jsonl",
		`{"id": "k1", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]}`,
		`{"id": "k2", "messages": [{"role": "user", "content": "q"}]}`)
	regen := write("regen.jsonl", userLine("g1", "hello"))
	settings := write("settings.json", `{"datasets": {"chats": {"replies": "keep"}}}`)
	cfg := Config{Client: kafkatest.Client(t, kc), Inputs: []string{results, records, chats, regen}, SettingsFile: settings,
		Defaults: topics.Sampling{MaxNewTokens: 77}, Logger: slog.New(slog.DiscardHandler)}
	var acked []string
	cfg.OnPrompt = func(p *topics.Prompt) { acked = append(acked, topics.AccountKey(p.ID, p.Turn, p.Origin)) }
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	wantOrigins := map[string]int{topics.OriginResult: 2, topics.OriginRecord: 2, topics.OriginDataset: 2, topics.OriginGenerated: 1}
	if res.Prompts != 7 || !reflect.DeepEqual(res.Origins, wantOrigins) || res.Rejected != 2 ||
		res.Reasons[ReasonDuplicateID] != 1 || res.Reasons[ReasonNoReply] != 1 {
		t.Fatalf("result %+v", res)
	}
	slices.Sort(acked)
	wantKeys := []string{"b1\x000", "b1\x001", "g1", "k1\x000", "k1\x001", "r1\x000", "r1\x001"}
	if !slices.Equal(acked, wantKeys) {
		t.Errorf("acknowledged %q, want %q", acked, wantKeys)
	}
	prompts := consume[topics.Prompt](t, kc, topics.TopicPrompts)
	byKey := map[string]*topics.Prompt{}
	for _, p := range prompts {
		byKey[topics.AccountKey(p.ID, p.Turn, p.Origin)] = p
		if p.Sampling.MaxNewTokens != 77 {
			t.Errorf("%s turn %d: sampling %+v", p.ID, p.Turn, p.Sampling)
		}
	}
	if p := byKey["r1\x000"]; p == nil || !slices.Equal(p.OutputIDs, []uint32{3}) || p.FinishReason != "length" || p.Dataset != "results" {
		t.Errorf("result row: %+v", p)
	}
	if p := byKey["b1\x001"]; p == nil || !slices.Equal(p.InputIDs, []uint32{1, 2, 3}) || !slices.Equal(p.OutputIDs, []uint32{4}) {
		t.Errorf("second record row: %+v", p)
	}
	if p := byKey["k1\x001"]; p == nil || p.Reply == nil || p.Reply.Content != "a2" || len(p.Messages) != 3 {
		t.Errorf("kept reply row: %+v", p)
	}
	if p := byKey["g1"]; p == nil || p.Origin != "" || len(p.Messages) != 1 {
		t.Errorf("conversation to generate: %+v", p)
	}
	got := map[string]string{}
	for _, r := range consume[topics.Rejection](t, kc, topics.TopicRejected) {
		got[fmt.Sprintf("%s:%d", filepath.Base(r.Source.File), r.Source.Line)] = r.Reason
	}
	if !strings.Contains(got["results.jsonl:3"], `duplicate row of id "r1" turn 0: already used by `+results+" line 1") ||
		!strings.Contains(got["chats.jsonl:2"], "no assistant reply") {
		t.Errorf("rejections %q", got)
	}
}

// Rows of token ids read from Parquet columns as from JSONL.
func TestReadParquetTokenRows(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "input_ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
		{Name: "loss_mask", Type: arrow.ListOf(arrow.PrimitiveTypes.Int8)},
	}, nil)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(
		`[{"id": "p", "input_ids": [7, 8, 9], "loss_mask": [0, 1, 1]}, {"id": "q", "input_ids": [1], "loss_mask": [2]}]`))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "records.parquet")
	writeParquet(t, path, rec, 10)
	var rows []topics.Prompt
	var errs []error
	err = ReadFile(path, func(p topics.Prompt, err error, src topics.Source, raw []byte) error {
		if err != nil {
			errs = append(errs, err)
		} else {
			rows = append(rows, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ID != "p" || rows[0].Origin != topics.OriginRecord || !slices.Equal(rows[0].InputIDs, []uint32{7}) ||
		!slices.Equal(rows[0].OutputIDs, []uint32{8, 9}) || rows[0].Source.Line != 1 {
		t.Errorf("rows %+v", rows)
	}
	if len(errs) != 1 || ReasonOf(errs[0]) != ReasonBadMask {
		t.Errorf("errors %v", errs)
	}
}

// FuzzParseRows: any line either fails with a reason or gives rows that hold together: a conversation's one
// prompt, or rows of token ids with a non-empty prompt and output, one id, distinct turns, each later row's
// prompt extending the one before with its output; the rows survive the wire codec token-exact.
func FuzzParseRows(f *testing.F) {
	for _, s := range []string{
		`{"id": "a", "input_ids": [1, 2, 3], "output_ids": [4, 5]}`,
		`{"input_ids": [10, 11], "output_ids": [12], "meta_info": {"id": "rid", "finish_reason": {"type": "length"}}}`,
		`{"id": "b", "turn": 3, "input_ids": [[1, 2, 3, 4, 5]], "loss_mask": [[0, 1, 0, 1, 1]]}`,
		`{"input_ids": [1, 2], "loss_mask": [0, 1], "metadata": {"finish_reason": "stop"}}`,
		`{"input_ids": [1], "output_ids": [2], "loss_mask": [0]}`,
		`{"input_ids": [1, -1], "output_ids": [2]}`, `{"input_ids": [1, 2], "loss_mask": [1, 0]}`,
		`{"id": "c", "messages": [{"role": "user", "content": "hi"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := ParseRows("f.jsonl", 1, data, "fz")
		if err != nil {
			var le *LineError
			if ReasonOf(err) == "" || !errors.As(err, &le) || le.Detail == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		if len(ps) == 0 {
			t.Fatal("no rows and no error")
		}
		if !topics.Kept(ps[0].Origin) {
			if len(ps) != 1 || ps[0].Origin != "" || len(ps[0].InputIDs) != 0 {
				t.Fatalf("a conversation made %d prompts: %+v", len(ps), ps)
			}
			return
		}
		for i, p := range ps {
			if p.ID == "" || p.ID != ps[0].ID || len(p.ID) > MaxIDBytes || p.Origin != ps[0].Origin || len(p.InputIDs) == 0 ||
				len(p.OutputIDs) == 0 || p.Turn != ps[0].Turn+i || len(p.Messages) != 0 {
				t.Fatalf("row %d of %d: %+v", i, len(ps), p)
			}
			if p.Origin == topics.OriginResult && len(ps) != 1 {
				t.Fatalf("a result made %d rows", len(ps))
			}
			if i > 0 {
				prev := ps[i-1]
				if !slices.Equal(p.InputIDs[:len(prev.InputIDs)+len(prev.OutputIDs)], slices.Concat(prev.InputIDs, prev.OutputIDs)) {
					t.Fatalf("row %d's prompt does not extend row %d", i, i-1)
				}
			}
			enc, err := topics.Marshal(&p)
			if err != nil {
				t.Fatal(err)
			}
			var back topics.Prompt
			if err := topics.Unmarshal(enc, &back); err != nil || !slices.Equal(back.InputIDs, p.InputIDs) ||
				!slices.Equal(back.OutputIDs, p.OutputIDs) || back.Origin != p.Origin || back.Turn != p.Turn {
				t.Fatalf("codec round trip: %v", err)
			}
		}
	})
}
