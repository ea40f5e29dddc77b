package generate

import (
	"flag"
	"fmt"

	"github.com/draftflow/draftflow/stages/generate/loop"
	"github.com/draftflow/draftflow/topics"
)

// What generate does with a reply that falls into a repetition loop (LoopsConfig.Action).
const (
	// LoopKeep stops the reply on its server and keeps it, cut where the server stopped, as a
	// turn with finish_reason "loop" (topics.FinishLoop) and stop_reason "loop": the GPU time a loop would
	// have spent up to max_new_tokens is saved, and the row stays in the shards, token-exact, where it can be
	// counted and filtered (its meta.loop says where the loop starts, so the text before it is still usable).
	LoopKeep = "keep"
	// LoopDrop stops the reply on its server and dead-letters the record (class "loop") instead of writing it.
	LoopDrop = "drop"
	// LoopMark lets the reply run to its own end and only records the loop (meta.loop) beside the server's
	// finish reason: to see what the detector would stop on a workload before letting it stop anything.
	LoopMark = "mark"
	// LoopOff (the default) does not watch replies: requests are sent without streaming. It stays the default
	// until the live server's cost of streaming every reply (SGLang sends the whole output so far in each
	// chunk) is measured against what the stop saves.
	LoopOff = "off"
)

// DefaultLoopAction is LoopsConfig.Action's default.
const DefaultLoopAction = LoopOff

// LoopsConfig says whether and how generate watches replies for repetition loops while they are generated
// (streamed /generate; a loop is stopped with /abort_request). The zero value is the default: LoopOff; the
// thresholds default to the loop package's.
type LoopsConfig struct {
	// Action is LoopKeep, LoopDrop, LoopMark or LoopOff (default LoopOff).
	Action string
	// Config holds the detector's thresholds (zero fields: loop's defaults).
	loop.Config
}

func (c LoopsConfig) withDefaults() LoopsConfig {
	if c.Action == "" {
		c.Action = DefaultLoopAction
	}
	c.Config = c.Config.WithDefaults()
	return c
}

func (c LoopsConfig) validate() error {
	switch c.Action {
	case "", LoopKeep, LoopDrop, LoopMark, LoopOff:
	default:
		return fmt.Errorf("generate: --loop-action %q: want keep, drop, mark or off", c.Action)
	}
	return c.Config.WithDefaults().Validate()
}

// watching reports whether replies are watched at all.
func (c LoopsConfig) watching() bool { return c.Action != LoopOff }

// stops reports whether a loop found is stopped on the server.
func (c LoopsConfig) stops() bool { return c.Action == LoopKeep || c.Action == LoopDrop }

func (c *LoopsConfig) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Action, "loop-action", DefaultLoopAction, "what to do with a reply that falls into a repetition loop: keep (stop it on the server, "+
		"keep it cut, finish_reason loop), drop (stop it, dead-letter the record), mark (let it run, record the loop), off (do not watch)")
	fs.IntVar(&c.MaxPeriod, "loop-max-period", loop.DefaultMaxPeriod, "longest repeated unit, in tokens, a loop is looked for with")
	fs.IntVar(&c.MinRepeats, "loop-min-repeats", loop.DefaultMinRepeats, "copies of the repeated unit a reply's tail must hold to be a loop")
	fs.IntVar(&c.MinTokens, "loop-min-tokens", loop.DefaultMinTokens, "tokens a reply's repeating tail must cover to be a loop")
}

// markLoop records the loop l found in g's reply: beside the server's finish reason under LoopMark, as the
// finish and stop reason otherwise.
func markLoop(g *topics.Generation, l loop.Loop, action string) {
	g.Meta.Loop = &topics.LoopMeta{Period: l.Period, Start: l.Start, Found: l.End}
	if action == LoopMark {
		return
	}
	g.Meta.FinishReason = topics.FinishLoop
	g.Meta.FinishMatched = nil
	if g.Thread != nil {
		// As a reply cut at max_new_tokens: it cannot stand in a later turn's history. A single turn stays
		// StopEnd, as one cut at max_new_tokens does.
		g.StopReason = topics.StopLoop
		g.StopDetail = loopDetail(l, len(g.OutputIDs))
	}
}

// loopDetail describes a loop in words.
func loopDetail(l loop.Loop, produced int) string {
	return fmt.Sprintf("repetition loop: %d-token unit repeated from output token %d, stopped after %d tokens (%d produced)",
		l.Period, l.Start, l.End, produced)
}
