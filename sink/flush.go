package sink

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// flushOverBudget flushes the largest buffers while the buffers together hold more than the sink may. Called
// with s.mu held.
func (s *sinker) flushOverBudget() {
	for s.nrows >= s.cfg.MaxBufferedRows || s.nbytes >= s.cfg.MaxBufferedBytes {
		var big *partState
		for _, q := range s.parts {
			if len(q.rows) > 0 && (big == nil || q.bytes > big.bytes) {
				big = q
			}
		}
		if big == nil || s.flush(big) != nil {
			return
		}
	}
}

// flush makes everything p absorbed durable and acknowledges its deliveries. Called with s.mu held.
func (s *sinker) flush(p *partState) error {
	if p.failed {
		return errors.New("sink: partition already failed")
	}
	if len(p.rows) == 0 && len(p.deliveries) == 0 && p.seen < p.next {
		return nil
	}
	start := time.Now()
	// Every next turn of the buffered rows must be in the prompts topic before the commit point.
	p.emitting.Wait()
	p.emitMu.Lock()
	emitErr := p.emitErr
	p.emitMu.Unlock()
	if emitErr != nil {
		p.failed = true
		if s.stopped && errors.Is(emitErr, context.Canceled) {
			// Shutting down with a next turn unsent: the partition's records are redelivered after a restart,
			// and the turn is written, and its next turn sent, then. Not a failure of the run.
			return emitErr
		}
		s.fail(emitErr)
		return emitErr
	}
	var shards []committedShard
	if len(p.rows) > 0 {
		var groups []runRows
		idx := map[*runState]int{}
		for _, br := range p.rows {
			i, ok := idx[br.run]
			if !ok {
				i = len(groups)
				idx[br.run] = i
				groups = append(groups, runRows{run: br.run})
			}
			groups[i].rows = append(groups[i].rows, br.row)
		}
		var err error
		shards, err = s.st.commitFlush(p.key, p.first, p.seen, groups, s.cfg.RowGroupRows)
		if err != nil {
			p.failed = true
			s.fail(err)
			return err
		}
	} else if p.seen >= p.next {
		s.st.advance(p.key, p.seen+1)
		if err := s.st.writeCheckpoint(); err != nil {
			p.failed = true
			s.fail(fmt.Errorf("sink: write checkpoint: %w", err))
			return err
		}
	}
	// Committed: the journal's records of the partition are in shards now.
	s.j.Retire(s.st.key(p.key))
	p.next = p.seen + 1
	for _, br := range p.rows {
		s.met.turns.WithLabelValues(br.row.StopReason).Inc()
		s.turns[br.row.StopReason]++
	}
	for _, sh := range shards {
		s.index.publish(sh.run.info.Fingerprint, sh.keys)
		s.announce.publish(sh.run.dir, sh.run.info.Fingerprint, sh.entry)
		s.met.rowsWritten.Add(float64(sh.entry.Rows))
		s.met.tokensWritten.Add(float64(sh.entry.Tokens))
		s.met.shardsWritten.Inc()
		s.met.shardBytes.Add(float64(sh.entry.Bytes))
	}
	for _, br := range p.rows {
		delete(br.run.buffered, rowKey{br.row.ID, br.row.Turn})
	}
	for _, d := range p.deliveries {
		d.Ack()
	}
	s.nrows -= len(p.rows)
	s.nbytes -= p.bytes
	s.met.bufferedRows.Sub(float64(len(p.rows)))
	nrows := len(p.rows)
	p.rows, p.deliveries, p.bytes, p.first = nil, nil, 0, -1
	s.met.flushSeconds.Observe(time.Since(start).Seconds())
	for _, sh := range shards {
		s.log.Info("shard written", "run", sh.run.info.DirName(), "shard", sh.entry.File, "rows", sh.entry.Rows,
			"tokens", sh.entry.Tokens, "bytes", sh.entry.Bytes)
		if s.cfg.OnDurable != nil {
			s.cfg.OnDurable(sh.ids)
		}
	}
	if nrows == 0 {
		s.log.Debug("offsets checkpointed", "topic", p.key.topic, "partition", p.key.partition, "next", p.next)
	}
	return nil
}

// timer fsyncs the journal and flushes buffers that are due, and flushes everything when ctx ends.
func (s *sinker) timer(ctx context.Context) {
	every := min(s.cfg.JournalSync, time.Second)
	if s.cfg.RotateInterval > 0 {
		every = min(every, s.cfg.RotateInterval/4)
	}
	if s.cfg.IdleFlush > 0 {
		every = min(every, s.cfg.IdleFlush/2)
	}
	every = max(every, 20*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.stop()
			return
		case <-t.C:
			if s.cfg.now().Sub(s.lastSync) >= s.cfg.JournalSync {
				s.syncJournal()
			}
			s.flushDue()
		}
	}
}

// syncJournal fsyncs the journal and reports the rows it made durable.
func (s *sinker) syncJournal() {
	start := time.Now()
	s.lastSync = s.cfg.now()
	ids, n, err := s.j.Sync()
	if err != nil {
		s.mu.Lock()
		s.fail(err)
		s.mu.Unlock()
		return
	}
	if n > 0 {
		s.met.journalBytes.Add(float64(n))
		s.met.journalSyncSeconds.Observe(time.Since(start).Seconds())
	}
	if len(ids) > 0 && s.cfg.OnJournaled != nil {
		s.cfg.OnJournaled(ids)
	}
}

func (s *sinker) flushDue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.err != nil {
		return
	}
	now := s.cfg.now()
	idle := s.cfg.IdleFlush > 0 && now.Sub(s.lastRecv) >= s.cfg.IdleFlush
	for _, p := range s.parts {
		due := s.cfg.RotateInterval > 0 && len(p.rows) > 0 && now.Sub(p.oldest) >= s.cfg.RotateInterval
		if idle && (len(p.rows) > 0 || len(p.deliveries) > 0 || p.seen >= p.next) {
			due = true
		}
		if len(p.deliveries) > 0 && closed(p.deliveries[0].Revoking()) {
			// A rebalance takes the partition away once its deliveries are done (or after the consumer's
			// RevokeTimeout): flush now, so the group commits what this sink wrote and the next owner starts
			// after it instead of writing it again into its own directory.
			due = true
		}
		if due && s.flush(p) != nil {
			return
		}
	}
}

// closed reports whether c is closed (a nil c never is).
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// stop flushes every buffer; what cannot be flushed is abandoned, to be redelivered after a restart.
func (s *sinker) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for _, p := range s.parts {
		if s.err == nil || !p.failed {
			if err := s.flush(p); err == nil {
				continue
			}
		}
		for _, d := range p.deliveries {
			d.Abandon()
		}
		p.deliveries = nil
	}
	// Deliveries waiting behind a dead letter in flight are redelivered after a restart; the dead letter's
	// own delivery is settled by its acknowledgement (the consumer's drain waits for it).
	for _, p := range s.parts {
		for _, w := range p.waiting {
			w.d.Abandon()
		}
		p.waiting = nil
	}
}
