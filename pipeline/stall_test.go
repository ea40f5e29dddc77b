package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeStage is a generate stage's stall state, set by the test.
type fakeStage struct {
	mu                  sync.Mutex
	reason              string
	answered, continued int64
}

func (f *fakeStage) Reason() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reason
}

func (f *fakeStage) Answered() (int64, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answered, f.continued
}

func (f *fakeStage) set(reason string, answered, continued int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reason, f.answered, f.continued = reason, answered, continued
}

// fakeBroker answers pings with err, counting them.
type fakeBroker struct {
	mu    sync.Mutex
	err   error
	pings int
}

func (b *fakeBroker) Ping(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pings++
	return b.err
}

func (b *fakeBroker) set(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
}

func (b *fakeBroker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pings
}

// watchOnClock is a stallWatch on a clock the test moves.
func watchOnClock(t *testing.T, gen stageStall, broker pinger) (*stallWatch, func(time.Duration)) {
	t.Helper()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	w := newStallWatch(gen)
	w.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	w.moved = w.now()
	if broker != nil {
		w.broker = broker
	}
	t.Cleanup(w.close)
	return w, func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
}

// settle waits for the broker check the last update started.
func settle(w *stallWatch) { w.pings.Wait() }

// TestStallWatchBrokerUnreachable: once no prompt is accounted for in stallAfter, the broker is asked; while it
// does not answer, that is the reason, ahead of the generate stage's own, on the progress line and in status;
// it is asked again every stallAfter, and the reason goes when it answers or a prompt is accounted for.
func TestStallWatchBrokerUnreachable(t *testing.T) {
	ctx := context.Background()
	gen := &fakeStage{reason: "every server is full"}
	broker := &fakeBroker{err: errors.New("dial tcp 127.0.0.1:9092: connect: connection refused")}
	w, advance := watchOnClock(t, gen, broker)

	w.update(ctx, 3, 7)
	settle(w)
	if n := broker.count(); n != 0 {
		t.Fatalf("broker asked %d times before the run stalled", n)
	}
	advance(stallAfter)
	w.update(ctx, 3, 7) // starts the check
	settle(w)
	note := w.update(ctx, 3, 7)
	want := "the Kafka broker does not answer: dial tcp 127.0.0.1:9092: connect: connection refused"
	if note != want {
		t.Fatalf("reason %q, want %q", note, want)
	}
	if got := w.reason(); got != want {
		t.Errorf("status reason %q, want the run's own %q", got, want)
	}
	if n := broker.count(); n != 1 {
		t.Errorf("broker asked %d times, want 1", n)
	}

	advance(stallAfter / 2) // not yet time to ask again
	w.update(ctx, 3, 7)
	settle(w)
	if n := broker.count(); n != 1 {
		t.Errorf("broker asked %d times within stallAfter of the last check, want 1", n)
	}
	broker.set(nil)
	advance(stallAfter / 2)
	w.update(ctx, 3, 7) // asks again: it answers now
	settle(w)
	if n := broker.count(); n != 2 {
		t.Errorf("broker asked %d times after 2 stallAfter, want 2", n)
	}
	if note := w.update(ctx, 3, 7); note != "every server is full" {
		t.Errorf("with the broker back, reason %q, want the generate stage's", note)
	}
	if got := w.reason(); got != "every server is full" {
		t.Errorf("status reason %q, want the generate stage's", got)
	}

	broker.set(errors.New("refused"))
	advance(stallAfter)
	w.update(ctx, 3, 7)
	settle(w)
	if note := w.update(ctx, 3, 7); !strings.HasPrefix(note, "the Kafka broker does not answer") {
		t.Fatalf("reason %q, want the broker's", note)
	}
	gen.set("", 0, 0)
	if note := w.update(ctx, 4, 6); note != "" {
		t.Errorf("a prompt accounted for still shows %q", note)
	}
}

// TestStallWatchWaitingOnEarlierTurns: turns are answered and continued, but no prompt is accounted for in
// stallAfter: every prompt left waits on its conversation's earlier turns, which the reason says with the
// counts. A broker that answers does not change it; progress clears it; a run with nothing missing has none.
func TestStallWatchWaitingOnEarlierTurns(t *testing.T) {
	ctx := context.Background()
	gen := &fakeStage{answered: 10, continued: 4}
	w, advance := watchOnClock(t, gen, &fakeBroker{})
	w.update(ctx, 2, 5)

	gen.set("", 16, 9) // six answers, five of them continued, since the count last moved
	advance(stallAfter - time.Second)
	if note := w.update(ctx, 2, 5); note != "" {
		t.Errorf("reason %q before stallAfter", note)
	}
	advance(time.Second)
	note := w.update(ctx, 2, 5)
	settle(w)
	want := "waiting on earlier turns: the 5 prompts left are conversations still being generated (6 turns answered in the last 10s; a prompt counts once its last turn is written)"
	if note != want {
		t.Fatalf("reason %q,\nwant %q", note, want)
	}
	if got := w.reason(); got != want {
		t.Errorf("status reason %q, want the run's own", got)
	}
	if note := w.update(ctx, 2, 5); note != want {
		t.Errorf("with the broker answering, reason %q, want it unchanged", note)
	}

	// The generate stage's reason comes first.
	gen.set("no SGLang server answers (http://a: connection refused)", 16, 9)
	if note := w.update(ctx, 2, 5); note != "no SGLang server answers (http://a: connection refused)" {
		t.Errorf("reason %q, want the generate stage's", note)
	}
	if got := w.reason(); got != "no SGLang server answers (http://a: connection refused)" {
		t.Errorf("status reason %q, want the generate stage's", got)
	}
	gen.set("", 16, 9)

	if note := w.update(ctx, 3, 4); note != "" {
		t.Errorf("a prompt accounted for still shows %q", note)
	}
	if note := w.update(ctx, 7, 0); note != "" {
		t.Errorf("nothing missing, reason %q", note)
	}
}

// TestStallWatchNoContinuedTurns: a run whose answers go on no conversation is not waiting on earlier turns,
// however long it stalls: without another reason it says none rather than a wrong one.
func TestStallWatchNoContinuedTurns(t *testing.T) {
	ctx := context.Background()
	gen := &fakeStage{answered: 3}
	w, advance := watchOnClock(t, gen, &fakeBroker{})
	w.update(ctx, 1, 4)
	gen.set("", 9, 0)
	advance(3 * stallAfter)
	w.update(ctx, 1, 4)
	settle(w)
	if note := w.update(ctx, 1, 4); note != "" {
		t.Errorf("reason %q, want none", note)
	}
}
