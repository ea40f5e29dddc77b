// Package progress shows how far a long step has come on a console it shares with log lines. On a terminal
// the progress is one line, redrawn in place; a log line written through the same Console clears it, is
// written whole, and the progress line is drawn again below it, so neither tears the other. Anywhere else (a
// file, a pipe, CI) the progress is a plain line every few seconds, without carriage returns. A rate and an
// ETA are shown only once there is progress to measure them by.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Console is an output shared by log lines (its Write) and progress lines (Bars made with New on it). It is
// safe for concurrent use.
type Console struct {
	mu   sync.Mutex
	w    io.Writer
	tty  bool
	line string // the progress line on the terminal now ("" when none)
}

// NewConsole returns a Console writing to w: a terminal when w is an *os.File on a character device.
func NewConsole(w io.Writer) *Console {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &Console{w: w, tty: tty}
}

// NewTerminal returns a Console that treats w as a terminal (for tests).
func NewTerminal(w io.Writer) *Console { return &Console{w: w, tty: true} }

// Terminal reports whether the Console draws progress in place.
func (c *Console) Terminal() bool { return c.tty }

// clearLine is a carriage return and ANSI "erase to end of line".
const clearLine = "\r\x1b[K"

// Write writes p (whole log lines) below the progress line: the line is cleared first and drawn again after.
func (c *Console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.line == "" {
		return c.w.Write(p)
	}
	if _, err := io.WriteString(c.w, clearLine); err != nil {
		return 0, err
	}
	n, err := c.w.Write(p)
	if err == nil && len(p) > 0 && p[len(p)-1] == '\n' {
		_, err = io.WriteString(c.w, c.line)
	}
	return n, err
}

// show draws line as the progress line (terminal), or writes it as a line of its own.
func (c *Console) show(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.tty {
		fmt.Fprintln(c.w, line)
		return
	}
	io.WriteString(c.w, clearLine+line)
	c.line = line
}

// done ends the progress line: on a terminal it is replaced by last (or erased when last is "").
func (c *Console) done(last string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tty {
		io.WriteString(c.w, clearLine)
		c.line = ""
	}
	if last != "" {
		fmt.Fprintln(c.w, last)
	}
}

// Options tune a Bar; zero values are defaults.
type Options struct {
	// Unit names what is counted ("prompts"); Bytes counts bytes instead, shown as kB, MB, GB.
	Unit  string
	Bytes bool
	// Every is how often a plain progress line is written when the Console is not a terminal (default 10 s).
	Every time.Duration
	// Redraw is how often the terminal line is drawn at most (default 200 ms).
	Redraw time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Bar is the progress of one step towards a known total. It is safe for concurrent use.
type Bar struct {
	c     *Console
	desc  string
	opt   Options
	total int64
	start time.Time

	mu       sync.Mutex
	n        int64
	note     string    // why the count does not move, shown after it ("" when none)
	drawn    time.Time // when the progress was last shown
	finished bool
}

// New starts a Bar named desc counting to total on w: a *Console, or any writer, treated as not a terminal.
func New(w io.Writer, desc string, total int64, opt Options) *Bar {
	c, ok := w.(*Console)
	if !ok {
		c = &Console{w: w}
	}
	if opt.Every <= 0 {
		opt.Every = 10 * time.Second
	}
	if opt.Redraw <= 0 {
		opt.Redraw = 200 * time.Millisecond
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	b := &Bar{c: c, desc: desc, opt: opt, total: total, start: opt.Now()}
	if c.tty {
		c.show(b.render(b.start))
		b.drawn = b.start
	}
	return b
}

// Add counts n more.
func (b *Bar) Add(n int64) { b.update(func() { b.n += n }) }

// Set sets the count to n.
func (b *Bar) Set(n int64) { b.update(func() { b.n = n }) }

// SetNote sets what the progress line says after the count (why it does not move, say); "" removes it. A new
// note is shown at once: on a terminal the line is redrawn, elsewhere a line is written (not for a removal).
func (b *Bar) SetNote(note string) {
	b.mu.Lock()
	if b.finished || note == b.note {
		b.mu.Unlock()
		return
	}
	b.note = note
	show := b.c.tty || note != ""
	line := ""
	if show {
		b.drawn = b.opt.Now()
		line = b.render(b.drawn)
	}
	b.mu.Unlock()
	if show {
		b.c.show(line)
	}
}

func (b *Bar) update(change func()) {
	b.mu.Lock()
	if b.finished {
		b.mu.Unlock()
		return
	}
	change()
	now := b.opt.Now()
	every := b.opt.Redraw
	if !b.c.tty {
		every = b.opt.Every
	}
	due := now.Sub(b.drawn) >= every
	if due {
		b.drawn = now
	}
	line := ""
	if due {
		line = b.render(now)
	}
	b.mu.Unlock()
	if due {
		b.c.show(line)
	}
}

// Finish ends the bar with a last line of the final count and the time taken.
func (b *Bar) Finish() { b.end(true) }

// Clear ends the bar without a last line (on a terminal the progress line is erased).
func (b *Bar) Clear() { b.end(false) }

func (b *Bar) end(last bool) {
	b.mu.Lock()
	if b.finished {
		b.mu.Unlock()
		return
	}
	b.finished = true
	now := b.opt.Now()
	line := ""
	if last {
		line = fmt.Sprintf("%s %s in %s", b.desc, b.count(b.n), now.Sub(b.start).Round(time.Second))
	}
	b.mu.Unlock()
	b.c.done(line)
}

// render is the progress line at now: "prompts 120/1000 (12%), 3.4 prompts/s, ETA 4m20s, 35s elapsed", and
// "; " and the note when there is one.
func (b *Bar) render(now time.Time) string {
	var sb strings.Builder
	sb.WriteString(b.desc)
	sb.WriteString(" ")
	sb.WriteString(b.count(b.n))
	if b.total > 0 {
		fmt.Fprintf(&sb, "/%s (%d%%)", b.count(b.total), 100*b.n/b.total)
	}
	elapsed := now.Sub(b.start)
	// A rate needs progress and time to measure it by; before both, none is shown (not "0 prompts/hr").
	if b.n > 0 && elapsed >= time.Second {
		rate := float64(b.n) / elapsed.Seconds()
		sb.WriteString(", ")
		sb.WriteString(b.rate(rate))
		if b.total > b.n {
			eta := time.Duration(float64(b.total-b.n) / rate * float64(time.Second))
			fmt.Fprintf(&sb, ", ETA %s", roundDuration(eta))
		}
	}
	fmt.Fprintf(&sb, ", %s elapsed", elapsed.Round(time.Second))
	if b.note != "" {
		sb.WriteString("; ")
		sb.WriteString(b.note)
	}
	return sb.String()
}

func (b *Bar) count(n int64) string {
	if b.opt.Bytes {
		return bytesText(float64(n))
	}
	return fmt.Sprint(n)
}

func (b *Bar) rate(perSecond float64) string {
	if b.opt.Bytes {
		return bytesText(perSecond) + "/s"
	}
	unit := b.opt.Unit
	if unit == "" {
		unit = "items"
	}
	switch {
	case perSecond >= 1:
		return fmt.Sprintf("%.1f %s/s", perSecond, unit)
	case perSecond*60 >= 1:
		return fmt.Sprintf("%.1f %s/min", perSecond*60, unit)
	}
	return fmt.Sprintf("%.1f %s/h", perSecond*3600, unit)
}

func bytesText(n float64) string {
	for _, u := range []string{"B", "kB", "MB", "GB", "TB"} {
		if n < 1000 || u == "TB" {
			if u == "B" {
				return fmt.Sprintf("%.0f %s", n, u)
			}
			return fmt.Sprintf("%.1f %s", n, u)
		}
		n /= 1000
	}
	return ""
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute)
	case d >= time.Minute:
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}
