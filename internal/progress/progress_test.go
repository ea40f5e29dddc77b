package progress

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestTerminalLogsDoNotTearTheBar: on a terminal, a log line written while the progress line is shown goes
// on a line of its own (the progress line is erased first) and the progress line comes back below it.
func TestTerminalLogsDoNotTearTheBar(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	con := NewTerminal(&out)
	log := slog.New(slog.NewTextHandler(con, nil))
	clock := &fakeClock{t: time.Unix(0, 0)}
	bar := New(con, "prompts", 100, Options{Unit: "prompts", Now: clock.now})
	clock.advance(time.Second)
	bar.Set(10)
	log.Info("a log line while the bar is shown")
	clock.advance(time.Second)
	bar.Set(20)
	bar.Clear()
	s := out.String()
	i := strings.Index(s, "time=")
	if i < 0 {
		t.Fatalf("no log line in %q", s)
	}
	if !strings.HasSuffix(s[:i], clearLine) {
		t.Errorf("the log line does not start on a cleared line: %q", s)
	}
	after := s[i:]
	nl := strings.IndexByte(after, '\n')
	if nl < 0 || !strings.HasPrefix(after[nl+1:], "prompts 10/100") {
		t.Errorf("the progress line is not drawn again below the log line: %q", after)
	}
	if !strings.HasSuffix(s, clearLine) {
		t.Errorf("Clear leaves the progress line: %q", s)
	}
}

// TestPlainProgressEveryFewSeconds: off a terminal, progress is a plain line (no carriage return) at most
// every Every, and Finish writes a last line.
func TestPlainProgressEveryFewSeconds(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0)}
	bar := New(&out, "prompts", 1000, Options{Unit: "prompts", Every: 5 * time.Second, Now: clock.now})
	for i := 1; i <= 100; i++ {
		clock.advance(500 * time.Millisecond) // 50 s in all
		bar.Set(int64(i * 10))
	}
	bar.Finish()
	s := out.String()
	if strings.ContainsAny(s, "\r\x1b") {
		t.Errorf("control characters off a terminal: %q", s)
	}
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) < 10 || len(lines) > 12 { // one at the first update, then one per 5 s, then the last
		t.Errorf("%d lines for 50 s at one every 5 s:\n%s", len(lines), s)
	}
	if last := lines[len(lines)-1]; last != "prompts 1000 in 50s" {
		t.Errorf("last line %q", last)
	}
	if !strings.Contains(lines[1], "20.0 prompts/s") || !strings.Contains(lines[1], "ETA") {
		t.Errorf("no rate or ETA once there is progress: %q", lines[1])
	}
}

// TestNoRateBeforeThereIsOne: before the first item, the line shows no rate and no ETA (not "0 prompts/hr").
func TestNoRateBeforeThereIsOne(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0)}
	bar := New(&out, "prompts", 1000, Options{Unit: "prompts", Now: clock.now})
	clock.advance(30 * time.Second)
	bar.Set(0)
	s := out.String()
	if !strings.Contains(s, "prompts 0/1000 (0%)") || strings.Contains(s, "/h") || strings.Contains(s, "/s") || strings.Contains(s, "ETA") {
		t.Errorf("line before any progress: %q", s)
	}
	// Bytes, slow rates.
	b := New(&out, "ingest", 10e6, Options{Bytes: true, Now: clock.now})
	clock.advance(2 * time.Second)
	b.Set(3e6)
	if !strings.Contains(out.String(), "ingest 3.0 MB/10.0 MB (30%), 1.5 MB/s, ETA 4.7s") {
		t.Errorf("bytes line: %q", out.String())
	}
	slow := New(&out, "prompts", 100, Options{Unit: "prompts", Now: clock.now})
	clock.advance(time.Hour)
	slow.Set(2)
	if !strings.Contains(out.String(), "2.0 prompts/h") {
		t.Errorf("slow rate: %q", out.String())
	}
}

// TestNoteSaysWhy: a note follows the count on the line; off a terminal a new note writes a line at once (not
// waiting for Every), the lines after it repeat it, and removing it writes nothing until the next line is due;
// on a terminal the line is redrawn with the note.
func TestNoteSaysWhy(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0)}
	bar := New(&out, "prompts", 1, Options{Unit: "prompts", Now: clock.now})
	bar.Set(0)
	clock.advance(time.Second)
	bar.SetNote("no SGLang server answers (http://127.0.0.1:1: connection refused)")
	bar.SetNote("no SGLang server answers (http://127.0.0.1:1: connection refused)") // the same: no line
	clock.advance(10 * time.Second)
	bar.Set(0)
	bar.SetNote("")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"prompts 0/1 (0%), 0s elapsed",
		"prompts 0/1 (0%), 1s elapsed; no SGLang server answers (http://127.0.0.1:1: connection refused)",
		"prompts 0/1 (0%), 11s elapsed; no SGLang server answers (http://127.0.0.1:1: connection refused)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	var tty bytes.Buffer
	tbar := New(NewTerminal(&tty), "prompts", 1, Options{Unit: "prompts", Now: clock.now})
	tbar.SetNote("every SGLang server is full")
	if !strings.HasSuffix(tty.String(), clearLine+"prompts 0/1 (0%), 0s elapsed; every SGLang server is full") {
		t.Errorf("terminal line with a note: %q", tty.String())
	}
	tbar.SetNote("")
	if !strings.HasSuffix(tty.String(), clearLine+"prompts 0/1 (0%), 0s elapsed") {
		t.Errorf("terminal line once the note is removed: %q", tty.String())
	}
}
