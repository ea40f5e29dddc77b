package livesglang

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/draftflow/draftflow/stages/ingest"
	"github.com/draftflow/draftflow/topics"
)

// nearTie is the epsilon of the capture check: where the reference's two largest logits differ by less, the
// server (another fp32 implementation of the same weights: other kernels, other summation orders) may pick
// the other token. Measured differences between the two implementations are around 1e-6.
const nearTie = 1e-3

// captureNew is max_new_tokens of the capture test: short, so a few dozen conversations fit the tier.
const captureNew = 24

// eosID is the model's end of turn, <|im_end|> (config.json eos_token_id, the tokenizer's eos_token): the
// server stops on it without being asked, and so does the reference.
const eosID = 151645

// TestCapture runs draftflow on a few dozen conversations (single and multi-turn) against the live server
// at temperature 0 in fp32 and checks every row against transformers: the prompt ids are the chat template's
// rendering of the row's history (transformers of requirements-test.txt), and the output ids are the greedy
// decode of the same weights from those prompt ids (transformers in the SGLang venv), position by position;
// a position whose reference top-2 logit gap is under nearTie may differ, and is counted. Half the
// conversations carry stop_token_ids chosen from a reference decode, so turns end early on them: those rows
// end with the matched stop token in output_ids, under the loss mask, and their conversations go on.
func TestCapture(t *testing.T) {
	need(t)
	srv := mainServer(t)
	dir := t.TempDir()

	var plain, stops []any
	for i := range 12 {
		plain = append(plain, chat(fmt.Sprintf("plain-%02d", i), fmt.Sprintf("Tell me about item %d and why it matters.", i)))
	}
	for i := range 24 {
		msgs := []string{fmt.Sprintf("Question %d: what is %d plus %d?", i, i, 2*i), "An answer.",
			"And times two?", "Another answer."}
		if i%3 == 0 {
			msgs = append(msgs, "Thanks, one more: why?", "Because.")
		}
		c := chat(fmt.Sprintf("stops-%02d", i), msgs...)
		if i%4 == 1 {
			c["messages"] = append([]map[string]string{{"role": "system", "content": "Be brief."}}, c["messages"].([]map[string]string)...)
		}
		stops = append(stops, c)
	}
	plainPath, stopsPath := filepath.Join(dir, "plain.jsonl"), filepath.Join(dir, "stops.jsonl")
	writeJSONL(t, plainPath, plain)
	writeJSONL(t, stopsPath, stops)

	// Stop tokens from the reference: greedy continuations of the stop conversations' first turns, and a few
	// tokens that end most of them early.
	first := readPrompts(t, stopsPath)
	var firstMsgs [][]topics.Message
	for _, p := range first {
		firstMsgs = append(firstMsgs, p.Messages)
	}
	ids := templateIDsBatch(t, firstMsgs)
	var dec struct {
		Outputs [][]int `json:"outputs"`
	}
	python(t, venvPython, "testdata/greedy.py", map[string]any{"mode": "decode", "model_dir": modelDir,
		"prompts": ids, "max_new_tokens": captureNew, "stop": []int{eosID}}, &dec)
	stopIDs := chooseStops(dec.Outputs, 3)
	t.Logf("stop_token_ids %v (from the reference decode of %d first turns)", stopIDs, len(ids))
	settings := filepath.Join(dir, "settings.json")
	data, _ := json.Marshal(map[string]any{"datasets": map[string]any{"stops": map[string]any{"stop_token_ids": stopIDs}}})
	if err := os.WriteFile(settings, data, 0o644); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "out")
	p := startDraftflow(t, "draftflow run", nil, "run", "--input", plainPath, "--input", stopsPath, "--settings", settings,
		"--model", modelDir, "--sglang", srv.url, "--out", out, "--max-new-tokens", fmt.Sprint(captureNew),
		"--temperature", "0")
	if err := p.wait(t, 10*time.Minute); err != nil {
		t.Fatalf("draftflow run: %v", err)
	}
	rows := readRows(t, out)

	// Every row, with the history it was generated from.
	type checked struct {
		r    shardRow
		msgs []topics.Message
		stop []int
	}
	var all []checked
	multi := 0
	for _, src := range []struct {
		path string
		stop []int
	}{{plainPath, nil}, {stopsPath, stopIDs}} {
		for _, p := range readPrompts(t, src.path) {
			conv := rows[p.ID]
			for turn := 0; ; turn++ {
				r, ok := conv[turn]
				if !ok {
					t.Errorf("%s: no row for turn %d", p.ID, turn)
					break
				}
				all = append(all, checked{r, slices.Clone(p.Messages), src.stop})
				if turn > 0 {
					multi++
				}
				if r.StopReason != topics.StopContinued {
					if len(conv) != turn+1 {
						t.Errorf("%s: %d rows, but turn %d is %q", p.ID, len(conv), turn, r.StopReason)
					}
					break
				}
				var reply topics.Message
				if err := json.Unmarshal([]byte(r.Reply), &reply); err != nil {
					t.Fatalf("%s turn %d: reply %q: %v", p.ID, turn, r.Reply, err)
				}
				g := topics.Generation{ID: p.ID, Turn: turn, StopReason: topics.StopContinued, Reply: &reply,
					Sampling: p.Sampling, Thread: &topics.Thread{Messages: p.Messages, Tools: p.Tools, Rest: p.Rest}}
				next, ok := g.Next()
				if !ok {
					t.Fatalf("%s turn %d: continued but no next turn", p.ID, turn)
				}
				p = next
			}
		}
	}
	if n := len(rows); n != len(plain)+len(stops) {
		t.Errorf("%d conversations in the shards, want %d", n, len(plain)+len(stops))
	}

	// The prompt ids: the chat template's rendering of each row's history.
	var msgs [][]topics.Message
	for _, c := range all {
		msgs = append(msgs, c.msgs)
	}
	want := templateIDsBatch(t, msgs)
	for i, c := range all {
		if got := c.r.InputIDs[:c.r.PromptLen]; !slices.Equal(asInts(got), want[i]) {
			t.Errorf("%s turn %d: prompt ids differ from apply_chat_template (%d vs %d ids)", c.r.ID, c.r.Turn, len(got), len(want[i]))
		}
	}

	// The output ids: the reference's greedy choice at every position, and the stop rule.
	var req []map[string]any
	for _, c := range all {
		req = append(req, map[string]any{"prompt": asInts(c.r.InputIDs[:c.r.PromptLen]), "output": asInts(c.r.InputIDs[c.r.PromptLen:])})
	}
	var ref struct {
		Rows []struct {
			Argmax  []int     `json:"argmax"`
			Gap     []float64 `json:"gap"`
			Deficit []float64 `json:"deficit"`
		} `json:"rows"`
		Transformers string `json:"transformers"`
		Torch        string `json:"torch"`
	}
	python(t, venvPython, "testdata/greedy.py", map[string]any{"mode": "check", "model_dir": modelDir, "rows": req}, &ref)
	positions, ties, tieDiffs, stopped := 0, 0, 0, 0
	for i, c := range all {
		r := c.r
		out := asInts(r.InputIDs[r.PromptLen:])
		name := fmt.Sprintf("%s turn %d", r.ID, r.Turn)
		if len(out) == 0 || int(r.CompletionLen) != len(out) {
			t.Errorf("%s: %d output ids, completion_len %d", name, len(out), r.CompletionLen)
			continue
		}
		rr := ref.Rows[i]
		for j, tok := range out {
			positions++
			if rr.Gap[j] < nearTie {
				ties++
			}
			if tok != rr.Argmax[j] {
				if rr.Deficit[j] < nearTie {
					tieDiffs++
					continue
				}
				t.Errorf("%s: output id %d is %d, the reference's greedy choice %d (logit %.3g below it)", name, j, tok, rr.Argmax[j], rr.Deficit[j])
			}
		}
		ends := append([]int{eosID}, c.stop...)
		for j, tok := range out[:len(out)-1] {
			if slices.Contains(ends, tok) {
				t.Errorf("%s: stop id %d at %d went on", name, tok, j)
			}
		}
		last := out[len(out)-1]
		switch r.FinishReason {
		case "stop":
			stopped++
			if !slices.Contains(ends, last) {
				t.Errorf("%s: finished by stop, but its last output id %d is no stop id %v", name, last, ends)
			}
		case "length":
			if len(out) != captureNew || slices.Contains(ends, last) {
				t.Errorf("%s: finished by length with %d ids ending %d", name, len(out), last)
			}
		default:
			t.Errorf("%s: finish_reason %q", name, r.FinishReason)
		}
		if len(r.LossMask) != len(r.InputIDs) {
			t.Errorf("%s: %d loss_mask entries for %d ids", name, len(r.LossMask), len(r.InputIDs))
		}
		for j, m := range r.LossMask {
			if want := boolU8(j >= int(r.PromptLen)); m != want {
				t.Errorf("%s: loss_mask[%d] = %d (prompt of %d ids), want %d", name, j, m, r.PromptLen, want)
				break
			}
		}
	}
	t.Logf("%d rows (%d at later turns, %d ended by a stop token) from %d conversations; %d output positions, "+
		"%d near ties (reference top-2 gap < %g), %d of them differing; reference transformers %s, torch %s",
		len(all), multi, stopped, len(rows), positions, ties, nearTie, tieDiffs, ref.Transformers, ref.Torch)
	if stopped < 5 || multi < 3 {
		t.Errorf("%d rows ended by a stop token and %d later turns: the stop path and multi-turn are not covered", stopped, multi)
	}
}

func boolU8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func asInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, v := range ids {
		out[i] = int(v)
	}
	return out
}

// readPrompts reads a JSONL file as ingest does: the first turn of each conversation.
func readPrompts(t *testing.T, path string) []topics.Prompt {
	t.Helper()
	var ps []topics.Prompt
	err := ingest.ReadFile(path, func(p topics.Prompt, perr error, src topics.Source, raw []byte) error {
		if perr != nil {
			return fmt.Errorf("%s line %d: %v", path, src.Line, perr)
		}
		ps = append(ps, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// chooseStops picks up to n tokens that end most of the greedy continuations early (in their middle third
// or so), for the stop_token_ids of the capture test.
func chooseStops(outputs [][]int, n int) []int {
	covered := make([]bool, len(outputs))
	var chosen []int
	for len(chosen) < n {
		score := map[int]int{}
		for i, o := range outputs {
			if covered[i] {
				continue
			}
			seen := map[int]bool{}
			for j, tok := range o {
				if seen[tok] || tok == eosID {
					continue
				}
				seen[tok] = true
				if j >= 3 && j < len(o)-3 {
					score[tok]++
				}
			}
		}
		best, bestScore := -1, 0
		for tok, s := range score {
			if s > bestScore || (s == bestScore && tok < best) {
				best, bestScore = tok, s
			}
		}
		if best < 0 {
			break
		}
		chosen = append(chosen, best)
		for i, o := range outputs {
			if k := slices.Index(o, best); k >= 3 {
				covered[i] = true
			}
		}
	}
	sort.Ints(chosen)
	return chosen
}

var pinRe = regexp.MustCompile(`(?m)^transformers==(\S+)`)

// templateIDsBatch is transformers' apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
// of each conversation with the model's tokenizer, from the pinned transformers of requirements-test.txt
// (the other reference tests'), in one Python process.
func templateIDsBatch(t *testing.T, convs [][]topics.Message) [][]int {
	t.Helper()
	reqs, err := os.ReadFile(filepath.Join(repoRoot, "requirements-test.txt"))
	if err != nil {
		t.Fatal(err)
	}
	pin := pinRe.FindSubmatch(reqs)
	if pin == nil {
		t.Fatal("requirements-test.txt pins no transformers")
	}
	var cases []map[string]any
	for i, m := range convs {
		cases = append(cases, map[string]any{"id": fmt.Sprint(i), "messages": m, "add_generation_prompt": true})
	}
	var ans struct {
		Results []struct {
			IDs   []int  `json:"ids"`
			Error string `json:"error"`
		} `json:"results"`
	}
	py := os.Getenv("PYTHON")
	if py == "" {
		py = "python3"
	}
	python(t, py, filepath.Join(repoRoot, "stages", "tokenize", "chattemplate", "testdata", "reference.py"),
		map[string]any{"mode": "chat", "model_dir": modelDir, "want_transformers": string(pin[1]), "tokenize": true, "cases": cases}, &ans)
	if len(ans.Results) != len(convs) {
		t.Fatalf("reference.py: %d results for %d cases", len(ans.Results), len(convs))
	}
	out := make([][]int, len(convs))
	for i, r := range ans.Results {
		if r.Error != "" {
			t.Fatalf("apply_chat_template of case %d: %s", i, r.Error)
		}
		out[i] = r.IDs
	}
	return out
}
