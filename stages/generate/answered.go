package generate

import (
	"context"
	"log/slog"
	"time"

	"github.com/draftflow/draftflow/stages/generate/answers"
	"github.com/draftflow/draftflow/topics"
)

// answerSyncEvery is how often the journal of answered generations is fsynced: what a machine crash can lose of
// it (a killed process loses nothing it wrote).
const answerSyncEvery = time.Second

// answerPruneEvery is how often segments whose generations are all in the sink's shards are removed.
const answerPruneEvery = 30 * time.Second

// answered is the stage's journal of answered generations (Config.AnswersDir): written before a generation is
// produced, consulted before a request is sent. A nil *answered journals nothing and finds nothing.
type answered struct {
	j      *answers.Journal
	shards *shardsView
	log    *slog.Logger
}

// openAnswered opens the journal under dir ("" : none) and reports what it holds from an earlier start.
func openAnswered(dir string, shards *shardsView, log *slog.Logger) (*answered, error) {
	if dir == "" {
		return nil, nil
	}
	j, err := answers.Open(dir)
	if err != nil {
		return nil, err
	}
	a := &answered{j: j, shards: shards, log: log}
	if n := j.Len(); n > 0 {
		log.Info("answered generations journaled by an earlier start; those not in the shards are produced again without a request",
			"dir", dir, "generations", n)
	}
	return a, nil
}

// record journals g, answered for the run fp, before it is produced. A failure is logged: the generation is
// still produced (only a kill before the sink holds it would cost a request again).
func (a *answered) record(fp string, g *topics.Generation) {
	if a == nil {
		return
	}
	v, err := topics.Marshal(g)
	if err == nil {
		err = a.j.Append(answers.Key{Run: fp, ID: g.ID, Turn: g.Turn}, v)
	}
	if err != nil {
		a.log.Warn("could not journal an answered generation; a kill before the sink holds it asks for it again", "id", g.ID, "turn", g.Turn, "err", err)
	}
}

// lookup returns the generation of the run fp, prompt id and turn that an earlier answer left in the journal.
func (a *answered) lookup(fp, id string, turn int) (*topics.Generation, bool) {
	if a == nil {
		return nil, false
	}
	v, ok, err := a.j.Lookup(answers.Key{Run: fp, ID: id, Turn: turn})
	if err != nil {
		a.log.Warn("could not read a journaled answer; asking a server again", "id", id, "turn", turn, "err", err)
		return nil, false
	}
	if !ok {
		return nil, false
	}
	var g topics.Generation
	if err := topics.Unmarshal(v, &g); err != nil {
		a.log.Warn("a journaled answer does not decode; asking a server again", "id", id, "turn", turn, "err", err)
		return nil, false
	}
	return &g, true
}

// prune removes the segments whose generations the sink's shards all hold.
func (a *answered) prune() {
	n, err := a.j.Prune(func(k answers.Key) bool { _, ok := a.shards.holds(k.Run, k.ID, k.Turn); return ok })
	if err != nil {
		a.log.Warn("could not remove a segment of answered generations", "err", err)
	}
	if n > 0 {
		a.log.Debug("answered generations in the shards removed from the journal", "segments", n)
	}
}

// run fsyncs the journal every answerSyncEvery and prunes it every answerPruneEvery until ctx ends; then it
// fsyncs, prunes and closes it.
func (a *answered) run(ctx context.Context) {
	if a == nil {
		return
	}
	sync := time.NewTicker(answerSyncEvery)
	defer sync.Stop()
	pruneAt := time.Now() // at once: what an earlier start left may be in the shards by now
	for {
		if err := a.j.Sync(); err != nil {
			a.log.Warn("could not fsync the answered generations", "err", err)
		}
		if !time.Now().Before(pruneAt) && a.shards.known() {
			a.prune()
			pruneAt = time.Now().Add(answerPruneEvery)
		}
		select {
		case <-ctx.Done():
			if err := a.j.Sync(); err != nil {
				a.log.Warn("could not fsync the answered generations", "err", err)
			}
			a.prune()
			if err := a.j.Close(); err != nil {
				a.log.Warn("could not close the answered generations", "err", err)
			}
			return
		case <-sync.C:
		}
	}
}
