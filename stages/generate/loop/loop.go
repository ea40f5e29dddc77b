// Package loop notices a reply that has become a repetition loop while it is generated: its last tokens
// repeat one period, exactly, over and over.
//
// A Detector is fed a reply's output token ids as they arrive (Push, Feed) and reports a loop once the
// reply's last L tokens are periodic with some period p <= Config.MaxPeriod (token i equals token i-p for
// every i in that tail), the tail covers at least Config.MinTokens tokens and holds at least
// Config.MinRepeats copies of the period (L >= MinRepeats*p). For every period it keeps the length of the
// current run of positions that match the position one period back, so each token costs MaxPeriod
// comparisons and the Detector MaxPeriod ring slots plus MaxPeriod counters, whatever the reply's length.
//
// Only exact repetition counts: a loop whose copies differ by a token restarts the count at each difference.
// That is what a model stuck in a loop produces (the copies are the model's most likely continuation, and
// sampling keeps choosing them), and what legitimate text rarely does for long: code, tables and lists
// repeat structure with other content in it (see docs/sglang.md for the false-stop measurement).
package loop

import (
	"errors"
	"fmt"
)

// Defaults of Config's fields. A loop is stopped once its copies cover MinTokens tokens and MinRepeats
// copies: 256 tokens of one period repeated at least 4 times; no legitimate reply among the chat, code and
// tool-call text the project measured repeats more than a fraction of that (docs/sglang.md), while a reply
// that loops to the reference workload's max_new_tokens (10,240) is stopped a few hundred tokens into its
// loop. Periods up to 256 tokens cover the loops reasoning models fall into (a sentence or a paragraph of
// "wait, let me check again").
const (
	DefaultMaxPeriod  = 256
	DefaultMinRepeats = 4
	DefaultMinTokens  = 256
)

// Config sets a Detector's thresholds. Zero values are the defaults.
type Config struct {
	// MaxPeriod is the longest period, in tokens, looked for (default DefaultMaxPeriod).
	MaxPeriod int
	// MinRepeats is how many copies of the period the repeating tail must hold (default DefaultMinRepeats;
	// at least 2).
	MinRepeats int
	// MinTokens is how many tokens the repeating tail must cover (default DefaultMinTokens).
	MinTokens int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.MaxPeriod == 0 {
		c.MaxPeriod = DefaultMaxPeriod
	}
	if c.MinRepeats == 0 {
		c.MinRepeats = DefaultMinRepeats
	}
	if c.MinTokens == 0 {
		c.MinTokens = DefaultMinTokens
	}
	return c
}

// Validate reports thresholds a Detector cannot use.
func (c Config) Validate() error {
	var errs []error
	if c.MaxPeriod < 1 || c.MaxPeriod > 1<<16 {
		errs = append(errs, fmt.Errorf("loop: max period %d out of range 1..65536", c.MaxPeriod))
	}
	if c.MinRepeats < 2 {
		errs = append(errs, fmt.Errorf("loop: min repeats %d: a loop has at least 2 copies", c.MinRepeats))
	}
	if c.MinTokens < 1 {
		errs = append(errs, fmt.Errorf("loop: min tokens %d must be positive", c.MinTokens))
	}
	return errors.Join(errs...)
}

// Loop is a repetition found at the end of a reply.
type Loop struct {
	// Period is the repeated unit's length, in tokens (the shortest period at which the tail was found).
	Period int
	// Start is the index, in the reply's output ids, of the first token of the repeating tail: ids[Start:End]
	// is periodic with Period.
	Start int
	// End is how many ids the Detector had seen when it found the loop.
	End int
}

// Repeats is how many copies of the period the loop covered when found (the last one may be partial).
func (l Loop) Repeats() float64 { return float64(l.End-l.Start) / float64(l.Period) }

// Detector watches one reply. It is not safe for concurrent use; make one per reply (or Reset it).
type Detector struct {
	cfg  Config
	ring []uint32 // the last MaxPeriod ids, twice: id i at ring[i % MaxPeriod] and ring[i % MaxPeriod + MaxPeriod]
	run  []int32  // run[p-1]: how many of the latest ids equal the id p before them, in a row
	need []int32  // need[p-1]: the run at period p that makes a loop
	n    int      // ids seen
	hit  *Loop
}

// New returns a Detector with cfg's thresholds (zero fields: defaults), or an error for invalid ones.
func New(cfg Config) (*Detector, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Detector{cfg: cfg, ring: make([]uint32, 2*cfg.MaxPeriod), run: make([]int32, cfg.MaxPeriod),
		need: make([]int32, cfg.MaxPeriod)}
	for p := 1; p <= cfg.MaxPeriod; p++ {
		// The tail of length run+p is periodic with period p: it must reach MinTokens and MinRepeats copies.
		d.need[p-1] = int32(max(cfg.MinTokens, cfg.MinRepeats*p) - p)
	}
	return d, nil
}

// Config returns the Detector's thresholds, defaults applied.
func (d *Detector) Config() Config { return d.cfg }

// Reset forgets what the Detector has seen.
func (d *Detector) Reset() {
	clear(d.run)
	d.n = 0
	d.hit = nil
}

// Seen is how many ids the Detector has been fed.
func (d *Detector) Seen() int { return d.n }

// Found returns the loop found, if any. Once found, a loop stays found until Reset.
func (d *Detector) Found() (Loop, bool) {
	if d.hit == nil {
		return Loop{}, false
	}
	return *d.hit, true
}

// Push feeds the reply's next id and reports whether the reply now ends in a loop (also true for every id
// after the one that completed it).
func (d *Detector) Push(id uint32) bool {
	if d.hit != nil {
		d.n++
		return true
	}
	P := len(d.run)
	n := d.n
	slot := n % P
	// The ring holds every id twice, at i mod P and i mod P + P, so the last P ids are ring[slot:slot+P] in
	// order: id n-p is win[lim-p].
	lim := min(n, P)
	win := d.ring[slot+P-lim : slot+P]
	run, need := d.run[:lim], d.need[:lim]
	found := 0
	for k := range run {
		if win[lim-1-k] == id {
			run[k]++
			if run[k] >= need[k] && found == 0 {
				found = k + 1
			}
		} else {
			run[k] = 0
		}
	}
	d.ring[slot], d.ring[slot+P] = id, id
	d.n++
	if found != 0 {
		d.hit = &Loop{Period: found, Start: d.n - int(d.run[found-1]) - found, End: d.n}
		return true
	}
	return false
}

// Feed pushes ids in order and returns the index in ids of the id that completed a loop, or -1 when none
// did (a loop found before the call: 0).
func (d *Detector) Feed(ids []uint32) int {
	if d.hit != nil {
		d.n += len(ids)
		if len(ids) == 0 {
			return -1
		}
		return 0
	}
	for k, id := range ids {
		if d.Push(id) {
			d.n += len(ids) - k - 1
			return k
		}
	}
	return -1
}

// Scan reports the first loop in ids under cfg (a Detector fed ids from the start), or false.
func Scan(cfg Config, ids []uint32) (Loop, bool, error) {
	d, err := New(cfg)
	if err != nil {
		return Loop{}, false, err
	}
	d.Feed(ids)
	l, ok := d.Found()
	return l, ok, nil
}
