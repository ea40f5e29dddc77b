package sink

import (
	"fmt"
	"math"

	"github.com/draftflow/draftflow/kafka/stream"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/sink/journal"
	"github.com/draftflow/draftflow/topics"
)

// take absorbs the valid generation g, consumed at offset off of p with the Kafka value value: as a row of
// its run, or as a duplicate of a row already written or buffered. d is its delivery, Done once the outcome
// is durable. replayed is nil for a consumed record, which take first appends to the journal; when the
// journal is replayed at start it holds the offsets whose next turn the broker already acknowledged (d is
// then nil). Called with s.mu held; returns a fatal error.
func (s *sinker) take(p *partState, off int64, value []byte, g *topics.Generation, d *delivery, replayed map[int64]bool) error {
	live := replayed == nil
	key := s.st.key(p.key)
	rs := s.st.run(shard.RunOf(g))
	k := rowKey{g.ID, int32(g.Turn)}
	dupW, win, err := rs.written(k)
	if err != nil {
		return fmt.Errorf("sink: id index of %s: %w", rs.dir, err)
	}
	_, dupB := rs.buffered[k]
	if dupW || dupB {
		// The copy in the shards continued its conversation from another incarnation of the generated topic (a
		// new embedded broker, a topic recreated): the prompts topic of that incarnation, and the next turn in
		// it, may be gone. Send the next turn again, built from the copy in the shards.
		again := dupW && win.continued && win.log != key.Log
		if live {
			kind, v := journal.Skip, []byte(nil)
			if again {
				kind, v = journal.Record, value // replayed, it sends the next turn again unless acknowledged
			}
			if err := s.j.Append(key, kind, off, v, ""); err != nil {
				return err
			}
			s.duplicates++
			if d != nil {
				d.Settle(stream.Outcome{Result: resultDuplicate})
			}
			s.log.Debug("duplicate dropped", "id", g.ID, "turn", g.Turn, "run", rs.info.DirName(), "at", fmt.Sprintf("%s/%d@%d", p.key.topic, p.key.partition, off))
		}
		s.absorb(p, off)
		if again {
			if live || !replayed[off] {
				if err := s.reemit(p, off, g, win); err != nil {
					return err
				}
			}
			if d != nil {
				p.deliveries = append(p.deliveries, d) // Done at the next flush, after the next turn was acknowledged
			}
			return nil
		}
		if d != nil {
			d.Ack()
		}
		// Only a copy already in a shard is reported, and only when it ended its conversation: a buffered
		// original is reported by OnDurable once its flush is durable.
		if live && dupW && !win.continued && s.cfg.OnDuplicate != nil {
			s.cfg.OnDuplicate(topics.AccountKey(g.ID, g.Turn, g.Origin))
		}
		return nil
	}
	r, err := rowOf(g)
	if err != nil {
		return err
	}
	if live {
		// In the journal before its next turn is sent: a later turn is never durable without this one.
		ended := ""
		if r.StopReason != topics.StopContinued {
			ended = accountKey(r)
		}
		if err := s.j.Append(key, journal.Record, off, value, ended); err != nil {
			return err
		}
	}
	if next, ok := g.Next(); ok && (live || !replayed[off]) {
		s.emit(p, off, &next)
	}
	rs.buffered[k] = struct{}{}
	s.absorb(p, off)
	if len(p.rows) == 0 {
		p.oldest = s.cfg.now()
	}
	p.rows = append(p.rows, bufferedRow{rs, r})
	if d != nil {
		d.Settle(stream.Outcome{Result: resultWritten, Tokens: r.Tokens()})
		p.deliveries = append(p.deliveries, d)
	}
	b := memBytes(r)
	p.bytes += b
	s.nrows++
	s.nbytes += b
	s.met.bufferedRows.Inc()
	return nil
}

func (s *sinker) absorb(p *partState, off int64) {
	if p.first < 0 {
		p.first = off
	}
	p.seen = off
}

// inShards takes a turn generate did not send to a server because topics.TopicShards said the shards hold it
// (g.InShards: no token ids, the thread only), consumed at offset off of p with the Kafka value value. If the
// run's shards hold it, it is counted as already in the shards (not as redone work); when the row in the
// shards continued its conversation, the next turn is sent again from the reply the shards recorded, so a
// conversation whose first k turns are in the shards resumes at turn k; when it ended its conversation,
// Config.OnDuplicate reports it. If they do not hold it (the shards topic spoke for another directory, or of
// rows since deleted), nothing can make the row here: the turn is dead-lettered with the reason, to be
// replayed. As take, it journals what it absorbs; replayed is nil except when the journal is replayed at
// start (d is then nil). Called with s.mu held.
func (s *sinker) inShards(p *partState, off int64, value []byte, d *delivery, g *topics.Generation, replayed map[int64]bool) {
	live := replayed == nil
	info := shard.RunOf(g)
	k := rowKey{g.ID, int32(g.Turn)}
	var dupW, dupB bool
	var win winner
	if rs := s.st.runs[info.Fingerprint]; rs != nil && g.Turn >= 0 && g.Turn <= math.MaxInt32 {
		var err error
		if dupW, win, err = rs.written(k); err != nil {
			s.fail(fmt.Errorf("sink: id index of %s: %w", rs.dir, err))
			if d != nil {
				d.Abandon()
			}
			return
		}
		_, dupB = rs.buffered[k]
	}
	if !dupW && !dupB {
		if !live {
			s.absorb(p, off) // taken in before the restart; what happened to the rows since is not this one's
			return
		}
		why := "the epoch is another sink start's: a sink of another output directory, or rows since deleted"
		if g.InShards == s.index.epochID() {
			why = "the epoch is this sink's own: rows deleted while it ran"
		}
		s.reject(p, d, d.Rejection("not_in_shards", fmt.Sprintf("generate skipped turn %d of %s as already in the shards (epoch %s of "+
			"the shards topic), but the shards of run %s in %s do not hold it (%s); replay the generate stage to generate it",
			g.Turn, g.ID, g.InShards, info.DirName(), s.cfg.Dir, why)))
		return
	}
	again := dupW && win.continued
	if live {
		kind, v := journal.Skip, []byte(nil)
		if again {
			kind, v = journal.Record, value // replayed, it sends the next turn again unless acknowledged
		}
		if err := s.j.Append(s.st.key(p.key), kind, off, v, ""); err != nil {
			s.fail(err)
			if d != nil {
				d.Abandon()
			}
			return
		}
		s.inShardsN++
		if d != nil {
			d.Settle(stream.Outcome{Result: resultInShards})
		}
		s.log.Debug("turn already in the shards", "id", g.ID, "turn", g.Turn, "run", info.DirName(), "at", fmt.Sprintf("%s/%d@%d", p.key.topic, p.key.partition, off))
	}
	s.absorb(p, off)
	if again {
		// Whichever topics carried the next turn before (lost ones, or these, then still in flight or long in
		// the shards), it is sent again from the recorded reply: a next turn in the shards comes back as an
		// in-shards record too, so the conversation is followed to its end at no GPU cost, and one that is
		// not resumes there.
		if live || !replayed[off] {
			if err := s.reemit(p, off, g, win); err != nil {
				s.fail(err)
				if d != nil {
					d.Abandon()
				}
				return
			}
		}
		if d != nil {
			p.deliveries = append(p.deliveries, d) // Done at the next flush, after the next turn was acknowledged
		}
		return
	}
	if d != nil {
		d.Ack()
	}
	if live && dupW && !win.continued && s.cfg.OnDuplicate != nil {
		s.cfg.OnDuplicate(topics.AccountKey(g.ID, g.Turn, g.Origin))
	}
}
