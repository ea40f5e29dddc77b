package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/sglang/sim"
	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/stages/tokenize"
	"github.com/draftflow/draftflow/topics"
)

// turnRow is one row of a multi-turn run's shards.
type turnRow struct {
	promptIDs  []int32
	outputLen  int
	lossMask   []uint8
	stopReason string
	reply      string
}

// TestPipelineMultiTurn regenerates every turn of chat and tool-calling conversations end to end (embedded
// broker, the bundled Qwen3-style model, a simulator scripting the source's replies in Qwen3's format with
// half of the tool calls diverging) and checks, per conversation: one row per turn up to where it ends, each
// turn but the last continued, the last ending as the source does or at the predicted divergence; each row's
// prompt ids exactly the chat template's rendering of the history at that turn (the earlier turns as the
// replies the shards record, then the source's tool results and user messages); the loss mask on the
// generated tokens only.
func TestPipelineMultiTurn(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "conversations.jsonl")
	const tools = `[{"type":"function","function":{"name":"lookup","description":"look up","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]`
	var lines []string
	for i := range 24 {
		if i%2 == 0 {
			lines = append(lines, fmt.Sprintf(`{"id":"chat-%d","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Q%d one"},{"role":"assistant","content":"A one"},{"role":"user","content":"Q%d two"},{"role":"assistant","content":"A two"},{"role":"user","content":"Q%d three"},{"role":"assistant","content":"A three"}]}`, i, i, i, i))
		} else {
			lines = append(lines, fmt.Sprintf(`{"id":"tool-%d","tools":%s,"messages":[{"role":"user","content":"find %d"},{"role":"assistant","content":"","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"lookup","arguments":"{\"q\": \"item %d\"}"}}]},{"role":"tool","tool_call_id":"call_%d","content":"found %d"},{"role":"assistant","content":"It is %d."},{"role":"user","content":"thanks"},{"role":"assistant","content":"welcome"}]}`, i, tools, i, i, i, i, i, i))
		}
	}
	if err := os.WriteFile(data, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var rc pipeline.Config
	rc.Kafka = kafkatest.Config(t, 4)
	rc.Ingest.Inputs = []string{data}
	rc.Ingest.Defaults.MaxNewTokens = 512
	rc.Sink.Dir = out
	rc.Sim = sim.Config{Instant: true, OutputLenMean: 100, Seed: 5, Conversations: data, ReplyFormat: "qwen3", ToolDivergenceRate: 0.5}
	rc.Timeout = 5 * time.Minute
	res, err := pipeline.Run(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	if res.Lost != 0 || res.Prompts != len(lines) {
		t.Fatalf("%d prompts, %d lost: %v", res.Prompts, res.Lost, res.Missing)
	}

	rows := map[string]map[int]turnRow{}
	eachShardBatch(t, out, func(rec arrow.Record, col func(string) arrow.Array) {
		ids := col("id").(*array.String)
		turns := col("turn").(*array.Int32)
		inp := col("input_ids").(*array.List)
		mask := col("loss_mask").(*array.List)
		plen := col("prompt_len").(*array.Int32)
		stop := col("stop_reason").(*array.String)
		reply := col("reply").(*array.String)
		inVals := inp.ListValues().(*array.Int32).Int32Values()
		maskVals := mask.ListValues().(*array.Uint8).Uint8Values()
		for i := 0; i < int(rec.NumRows()); i++ {
			id, turn := ids.Value(i), int(turns.Value(i))
			if rows[id] == nil {
				rows[id] = map[int]turnRow{}
			}
			if _, dup := rows[id][turn]; dup {
				t.Errorf("%s turn %d: two rows", id, turn)
			}
			s, e := inp.ValueOffsets(i)
			ms, me := mask.ValueOffsets(i)
			p := int(plen.Value(i))
			rows[id][turn] = turnRow{promptIDs: slices.Clone(inVals[s : s+int64(p)]), outputLen: int(e-s) - p,
				lossMask: slices.Clone(maskVals[ms:me]), stopReason: stop.Value(i), reply: reply.Value(i)}
		}
	})

	model, cleanup, err := tokenize.LoadModelOrBundled("")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	err = ingest.ReadFile(data, func(p topics.Prompt, perr error, src topics.Source, raw []byte) error {
		if perr != nil {
			t.Errorf("line %d: %v", src.Line, perr)
			return nil
		}
		conv := rows[p.ID]
		p.Sampling.MaxNewTokens = 512
		for turn := 0; ; turn++ {
			r, ok := conv[turn]
			if !ok {
				t.Errorf("%s: no row for turn %d", p.ID, turn)
				return nil
			}
			counts[r.stopReason]++
			want, err := model.Encode(&p)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(asUint32(r.promptIDs), want) {
				t.Errorf("%s turn %d: prompt ids differ from the template's rendering of the history (%d vs %d ids)", p.ID, turn, len(r.promptIDs), len(want))
			}
			for i, m := range r.lossMask {
				if want := uint8(0); i >= len(r.promptIDs) && m != 1 || i < len(r.promptIDs) && m != want {
					t.Fatalf("%s turn %d: loss mask %d at %d (prompt %d ids)", p.ID, turn, m, i, len(r.promptIDs))
				}
			}
			// What the turn should have come to, from the source and the simulator's divergence draw.
			orig := p.Rest[0]
			wantStop := topics.StopContinued
			switch {
			case len(orig.ToolCalls) > 0 && sim.Diverges(rc.Sim.Seed, rc.Sim.ToolDivergenceRate, p.ID, turn):
				wantStop = topics.StopToolDivergence
			case !(&topics.Thread{Rest: p.Rest}).HasNext():
				wantStop = topics.StopEnd
			}
			if r.stopReason != wantStop {
				t.Errorf("%s turn %d: stop reason %q, want %q", p.ID, turn, r.stopReason, wantStop)
			}
			if wantStop != topics.StopContinued {
				if len(conv) != turn+1 {
					t.Errorf("%s: %d rows, the conversation ended at turn %d", p.ID, len(conv), turn)
				}
				return nil
			}
			var reply topics.Message
			if err := json.Unmarshal([]byte(r.reply), &reply); err != nil {
				t.Fatalf("%s turn %d: reply %q: %v", p.ID, turn, r.reply, err)
			}
			g := topics.Generation{ID: p.ID, Turn: turn, StopReason: topics.StopContinued, Reply: &reply, Sampling: p.Sampling,
				Thread: &topics.Thread{Messages: p.Messages, Tools: p.Tools, Rest: p.Rest}}
			next, ok := g.Next()
			if !ok {
				t.Fatalf("%s turn %d: continued but no next turn", p.ID, turn)
			}
			p = next
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if counts[topics.StopContinued] == 0 || counts[topics.StopEnd] == 0 || counts[topics.StopToolDivergence] == 0 {
		t.Fatalf("outcomes %v: want continued, end and tool_divergence turns", counts)
	}
	for reason, n := range counts {
		if res.Turns[reason] != int64(n) {
			t.Errorf("run summary counts %d %s turns, the shards %d", res.Turns[reason], reason, n)
		}
	}
	t.Logf("turns by stop reason: %v", counts)
}

// checkConversationsHang reads the stop reasons of the shards under out and checks that every conversation
// hangs together: its turns are 0..n without gaps, each (id, turn) once, every turn but the last continued
// and the last not. It returns the stop reasons by id and turn.
func checkConversationsHang(t *testing.T, out string) map[string]map[int]string {
	t.Helper()
	conv := map[string]map[int]string{}
	eachShardBatch(t, out, func(rec arrow.Record, col func(string) arrow.Array) {
		ids := col("id").(*array.String)
		turns := col("turn").(*array.Int32)
		stop := col("stop_reason").(*array.String)
		for i := 0; i < int(rec.NumRows()); i++ {
			id, turn := ids.Value(i), int(turns.Value(i))
			if conv[id] == nil {
				conv[id] = map[int]string{}
			}
			if _, dup := conv[id][turn]; dup {
				t.Errorf("%s turn %d: two rows", id, turn)
			}
			conv[id][turn] = stop.Value(i)
		}
	})
	for id, turns := range conv {
		first := len(turns)
		for turn := range turns {
			first = min(first, turn)
		}
		last := first + len(turns) - 1
		for turn := first; turn <= last; turn++ {
			reason, ok := turns[turn]
			switch {
			case !ok:
				t.Errorf("%s: turns %d..%d with turn %d missing", id, first, last, turn)
			case turn < last && reason != topics.StopContinued:
				t.Errorf("%s: turn %d is %q, but turn %d follows it", id, turn, reason, turn+1)
			case turn == last && reason == topics.StopContinued:
				t.Errorf("%s: turn %d continued, but no turn %d reached the shards", id, turn, turn+1)
			}
		}
	}
	return conv
}

func asUint32(ids []int32) []uint32 {
	out := make([]uint32, len(ids))
	for i, v := range ids {
		out[i] = uint32(v)
	}
	return out
}
