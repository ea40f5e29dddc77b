package pipeline

import (
	"strings"
	"sync"

	"github.com/draftflow/draftflow/internal/idset"
)

// The outcomes the tracker records per id, as bits of its one-byte value.
const (
	idExpected byte = 1 << iota // ingest wrote it (Kafka acknowledged the prompt)
	idWritten                   // the sink made a row of it durable in this run
	idPresent                   // the sink dropped it: already in the shards
	idRejected                  // a stage after ingest dead-lettered it
	idOutcomes = idWritten | idPresent | idRejected
)

// maxListedMissing is how many missing ids a run lists.
const maxListedMissing = 10

// tracker accounts for every ingested id (its account key, topics.AccountKey: a conversation by id, a row brought
// in with its output by id and turn): written, already present, or rejected downstream. The ids live in a
// temporary file (internal/idset); memory holds two counters and a bounded number of pending ids.
type tracker struct {
	mu       sync.Mutex
	ids      *idset.Set // id -> outcome bits
	expected int        // ids with idExpected
	done     int        // of them, ids with an outcome too
	err      error      // the first failure of the id set
	changed  chan struct{}
}

func newTracker() (*tracker, error) {
	ids, err := idset.New("")
	if err != nil {
		return nil, err
	}
	return &tracker{ids: ids, changed: make(chan struct{}, 1)}, nil
}

func (t *tracker) close() error { return t.ids.Close() }

func (t *tracker) poke() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// mark records the outcome bit for ids.
func (t *tracker) mark(bit byte, ids ...string) {
	t.mu.Lock()
	for _, id := range ids {
		if t.err != nil {
			break
		}
		v, _, err := t.ids.Get(id)
		if err != nil {
			t.err = err
			break
		}
		var old byte
		if len(v) > 0 {
			old = v[0]
		}
		now := old | bit
		if now == old {
			continue
		}
		if old&idExpected == 0 && now&idExpected != 0 {
			t.expected++
		}
		if accounted(now) && !accounted(old) {
			t.done++
		}
		t.err = t.ids.Put(id, []byte{now})
	}
	t.mu.Unlock()
	t.poke()
}

// showKey writes an account key (topics.AccountKey) for people: the id, or "id (turn N)" for a kept row.
func showKey(key string) string {
	if id, turn, ok := strings.Cut(key, "\x00"); ok {
		return id + " (turn " + turn + ")"
	}
	return key
}

// accounted reports whether an expected id has an outcome.
func accounted(bits byte) bool { return bits&idExpected != 0 && bits&idOutcomes != 0 }

// status counts the accounted-for expected ids and the rest.
func (t *tracker) status() (done, missing int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done, t.expected - t.done, t.err
}

// account fills in res's counts of the expected ids by outcome (written before present before rejected) and
// lists up to maxListedMissing of the ids without one.
func (t *tracker) account(res *Result) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	return t.ids.ForEach(func(id string, v []byte) error {
		bits := v[0]
		switch {
		case bits&idExpected == 0:
		case bits&idWritten != 0:
			res.Written++
		case bits&idPresent != 0:
			res.AlreadyPresent++
		case bits&idRejected != 0:
			res.PipelineRejected++
		default:
			res.Lost++
			if len(res.Missing) < maxListedMissing {
				res.Missing = append(res.Missing, showKey(id))
			}
		}
		return nil
	})
}
