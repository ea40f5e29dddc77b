package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/draftflow/draftflow/stages/generate"
)

// stallAfter is how long a run goes without a prompt accounted for before it looks for a reason beyond the
// generate stage's (see stallWatch).
const stallAfter = generate.StallAfter

// stallWatch says why a run makes no progress, for its progress line and its generate stage's status record.
// The reasons, first that holds: the Kafka broker does not answer (asked once no prompt was accounted for in
// stallAfter, then every stallAfter while none is), the generate stage's (no SGLang server answers, with each URL
// and why, at once; every server full once none answered for stallAfter), and every prompt left waiting on
// earlier turns of its conversation (no prompt accounted for in stallAfter while turns that a later turn follows
// were answered). It is safe for concurrent use; close waits for the broker check it started.
type stallWatch struct {
	gen    stageStall
	broker pinger // set once the run has its client
	now    func() time.Time

	closing context.Context // ended by close: a broker check in flight stops
	stop    context.CancelFunc
	pings   sync.WaitGroup

	mu           sync.Mutex
	done         int       // prompts accounted for at the last update
	moved        time.Time // when done last changed (or the watch started)
	answeredAt   int64     // the generate stage's answers and continued turns when done last changed
	continuedAt  int64
	pinging      bool
	pinged       time.Time
	brokerErr    error  // the last ping's, while no prompt is accounted for
	note         string // the reason now
	noteInStatus bool   // note is the run's own (not the generate stage's): status shows it too
}

// stageStall is what the watch asks the generate stage (generate.Stall).
type stageStall interface {
	Reason() string
	Answered() (answered, continued int64)
}

// pinger is what the watch asks the broker (kafka.Client).
type pinger interface {
	Ping(ctx context.Context) error
}

func newStallWatch(gen stageStall) *stallWatch {
	closing, stop := context.WithCancel(context.Background())
	return &stallWatch{gen: gen, now: time.Now, moved: time.Now(), closing: closing, stop: stop}
}

// close ends a broker check in flight and waits for it: call it before the client goes.
func (w *stallWatch) close() {
	w.stop()
	w.pings.Wait()
}

// update takes the count of prompts accounted for and left, and returns the reason the run makes no progress
// ("" when it does, or none is known).
func (w *stallWatch) update(ctx context.Context, done, missing int) string {
	now := w.now()
	answered, continued := w.gen.Answered()
	w.mu.Lock()
	defer w.mu.Unlock()
	if done != w.done {
		w.done, w.moved, w.answeredAt, w.continuedAt, w.brokerErr = done, now, answered, continued, nil
	}
	still := now.Sub(w.moved)
	if still >= stallAfter && !w.pinging && now.Sub(w.pinged) >= stallAfter && w.broker != nil {
		w.pinging, w.pinged = true, now
		pctx, cancel := context.WithCancel(ctx)
		unhook := context.AfterFunc(w.closing, cancel)
		w.pings.Add(1)
		go func() {
			defer w.pings.Done()
			defer unhook()
			defer cancel()
			w.ping(pctx)
		}()
	}
	note, own := "", true
	switch why := w.gen.Reason(); {
	case missing == 0:
	case w.brokerErr != nil:
		note = fmt.Sprintf("the Kafka broker does not answer: %v", w.brokerErr)
	case why != "":
		note, own = why, false
	case still >= stallAfter && continued > w.continuedAt:
		note = fmt.Sprintf("waiting on earlier turns: the %d prompts left are conversations still being generated "+
			"(%d turns answered in the last %s; a prompt counts once its last turn is written)",
			missing, answered-w.answeredAt, still.Round(time.Second))
	}
	w.note, w.noteInStatus = note, own && note != ""
	return note
}

// ping asks the broker whether it answers, bounded by stallAfter.
func (w *stallWatch) ping(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, stallAfter)
	err := w.broker.Ping(pctx)
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pinging = false
	if ctx.Err() == nil {
		w.brokerErr = err
	}
}

// reason is why the generate stage, or the run around it, makes no progress: the generate stage's status record
// shows it.
func (w *stallWatch) reason() string {
	w.mu.Lock()
	note, own := w.note, w.noteInStatus
	w.mu.Unlock()
	if own {
		return note
	}
	return w.gen.Reason()
}
