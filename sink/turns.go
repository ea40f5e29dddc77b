package sink

import (
	"encoding/json"
	"fmt"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/topics"
)

// emit writes next (a conversation's next turn, built from the row at offset off of p) to the prompts topic,
// retrying while the run lasts, and records its acknowledgement in the journal. It does not wait for a flush:
// the partition's next flush waits for it before its commit point. A next turn over the message limit is
// dead-lettered (the conversation ends there, its turns so far in the shards); any other failure fails that
// flush, so the row is written again, and its next turn sent again, after a restart. Called with s.mu held.
func (s *sinker) emit(p *partState, off int64, next *topics.Prompt) {
	key := s.st.key(p.key)
	p.emitting.Add(1)
	s.prompts.Send(next.ID, next, func(err error) {
		if err == nil {
			s.met.continuations.Inc()
			s.j.Emitted(key, off)
			p.emitting.Done()
			return
		}
		if !kafka.IsRecordTooLarge(err) {
			p.emitFailed(fmt.Errorf("sink: write turn %d of %s to the prompts topic: %w", next.Turn, next.ID, err))
			p.emitting.Done()
			return
		}
		rej := &topics.Rejection{ID: next.ID, Dataset: next.Dataset, Source: next.Source, Class: stream.TooLarge,
			Reason: fmt.Sprintf("turn %d of conversation %s cannot be sent: %v; the conversation ends at turn %d", next.Turn, next.ID, err, next.Turn-1)}
		s.life.DeadLetter(rej, func(err error) {
			if err != nil {
				p.emitFailed(fmt.Errorf("sink: dead-letter turn %d of %s: %w", next.Turn, next.ID, err))
			} else {
				s.life.Count(stream.Outcome{Result: stream.Rejected, Class: stream.TooLarge})
			}
			p.emitting.Done()
		})
	})
}

func (p *partState) emitFailed(err error) {
	p.emitMu.Lock()
	defer p.emitMu.Unlock()
	if p.emitErr == nil {
		p.emitErr = err
	}
}

// reemit sends the next turn of a duplicate (at offset off of p) whose copy in the shards (win) continued its
// conversation: the duplicate's own thread (every copy of a turn has the same) with the reply of the copy in
// the shards. Called with s.mu held.
func (s *sinker) reemit(p *partState, off int64, g *topics.Generation, win winner) error {
	var reply topics.Message
	if err := json.Unmarshal(win.reply, &reply); err != nil {
		return fmt.Errorf("sink: id index of %s turn %d holds a reply that does not decode: %w", g.ID, g.Turn, err)
	}
	c := *g
	c.Reply, c.StopReason = &reply, topics.StopContinued
	if next, ok := c.Next(); ok {
		s.log.Debug("next turn sent again from the reply in the shards", "id", g.ID, "turn", next.Turn)
		s.emit(p, off, &next)
	}
	return nil
}
