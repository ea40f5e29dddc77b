package sink

import (
	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/sink/journal"
	"github.com/draftflow/draftflow/topics"
)

// reject dead-letters a delivery (the lifecycle's dead letters: retried while the run lasts). Called with s.mu
// held; it does not wait for the broker. Until the dead letter is acknowledged the partition absorbs nothing
// after it (later deliveries wait in p.waiting), so no flush checkpoints past it; on the acknowledgement the
// delivery is absorbed and finished as rejected, and the waiting ones are handled. If the run ends first, the
// partition stops there: the delivery and those waiting behind it are abandoned and redelivered after a restart.
func (s *sinker) reject(p *partState, d *delivery, rej *topics.Rejection) {
	p.rejecting = true
	d.DeadLetter(rej, func(err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.rejectDone(p, d, rej.Class, err)
	})
}

// rejectDone settles a dead letter (err nil: acknowledged; else the run ended first). Called with s.mu held.
func (s *sinker) rejectDone(p *partState, d *delivery, class string, err error) {
	p.rejecting = false
	waiting := p.waiting
	p.waiting = nil
	if err != nil {
		p.blocked = true
		d.Abandon()
		for _, w := range waiting {
			w.d.Abandon()
		}
		s.log.Info("dead letter not written before the sink stopped; redelivered after a restart", "at", d.Where(), "err", err)
		return
	}
	if err := s.j.Append(s.st.key(p.key), journal.Skip, d.Message().Offset, nil, ""); err != nil {
		s.fail(err)
		d.Abandon()
		for _, w := range waiting {
			w.d.Abandon()
		}
		return
	}
	s.absorb(p, d.Message().Offset)
	d.Finish(stream.Outcome{Result: stream.Rejected, Class: class})
	for _, w := range waiting {
		s.handleLocked(w.d, w.undecodable) // waits again behind the next dead letter, if it makes one
	}
}
