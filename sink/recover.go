package sink

import (
	"cmp"
	"fmt"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/sink/journal"
	"github.com/draftflow/draftflow/topics"
)

// recoverJournal brings back what the journal held at start (openJournal). A partition of the incarnation of
// the generated topic being consumed is buffered again exactly as it was, its segments kept and appended to;
// Kafka redelivers the same records from the group's committed offset, and those the journal already holds
// are resolved by the partition's next flush like any rewind. A partition of another incarnation (a new
// embedded broker: a second `draftflow run`; a topic recreated) never sees its offsets again, so its rows are
// written into shards at once, under that incarnation's offsets. Either way no row the journal holds is
// generated again.
//
// It runs in two passes: current false writes the other incarnations' rows into shards (before the sink
// publishes what its shards hold), current true buffers the consumed incarnation's again.
func (s *sinker) recoverJournal(recs []*journal.Recovered, current bool) error {
	s.mu.Lock()
	var journaled, durable []string
	for _, r := range recs {
		pk := partKey{r.Key.Topic, r.Key.Partition}
		if (r.Key == s.st.key(pk)) != current {
			continue
		}
		if current {
			s.j.Adopt(r)
			p := s.part(pk)
			rows := 0
			for _, en := range r.Entries {
				if en.Kind == journal.Skip {
					s.absorb(p, en.Offset)
					continue
				}
				g, err := journalGeneration(r, en)
				if err != nil {
					s.mu.Unlock()
					return err
				}
				if g.InShards != "" {
					s.inShards(p, en.Offset, en.Value, nil, g, r.Emitted)
					continue
				}
				before := len(p.rows)
				if err := s.take(p, en.Offset, en.Value, g, nil, r.Emitted); err != nil {
					s.mu.Unlock()
					return err
				}
				if len(p.rows) > before {
					rows++
					if cmp.Or(g.StopReason, topics.StopEnd) != topics.StopContinued {
						journaled = append(journaled, topics.AccountKey(g.ID, g.Turn, g.Origin))
					}
				}
			}
			s.log.Info("journal recovered: rows buffered again", "topic", pk.topic, "partition", pk.partition,
				"rows", rows, "offsets", fmt.Sprintf("%d-%d", p.first, p.seen), "bytes", r.Size, "torn_bytes", r.Torn)
			continue
		}
		r.Last.Close()
		ids, err := s.flushJournaled(r)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		durable = append(durable, ids...)
		s.j.Remove(r.Files)
	}
	// A journal may hold more than the buffers may (a smaller RotateRows than the last run's).
	for _, p := range s.parts {
		if len(p.rows) >= s.cfg.RotateRows || p.bytes >= s.cfg.RotateBytes {
			if err := s.flush(p); err != nil {
				s.mu.Unlock()
				return err
			}
		}
	}
	s.flushOverBudget()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if len(durable) > 0 && s.cfg.OnDurable != nil {
		s.cfg.OnDurable(durable)
	}
	if len(journaled) > 0 && s.cfg.OnJournaled != nil {
		s.cfg.OnJournaled(journaled)
	}
	return nil
}

// flushJournaled writes the rows of a journal of another incarnation of the topic into shards, one flush of its
// offset range, deciding duplicates as the live sink does, and returns the account keys of the rows that ended
// their conversation.
// Next turns are not sent: that incarnation's prompts topic is not this one, and when the conversation's turns
// come again on this one, the duplicate of a continued turn sends its next turn (take). Called with s.mu held.
func (s *sinker) flushJournaled(r *journal.Recovered) ([]string, error) {
	first, last := r.Entries[0].Offset, r.Entries[len(r.Entries)-1].Offset
	var groups []runRows
	idx := map[*runState]int{}
	seen := map[*runState]map[rowKey]bool{}
	nrows := 0
	for _, en := range r.Entries {
		if en.Kind != journal.Record {
			continue
		}
		g, err := journalGeneration(r, en)
		if err != nil {
			return nil, err
		}
		if g.InShards != "" {
			continue // already in the shards; its next turn is sent again when the turn comes again
		}
		rs := s.st.run(shard.RunOf(g))
		k := rowKey{g.ID, int32(g.Turn)}
		dup, _, err := rs.written(k)
		if err != nil {
			return nil, fmt.Errorf("sink: id index of %s: %w", rs.dir, err)
		}
		if _, buffered := rs.buffered[k]; dup || buffered || seen[rs][k] {
			continue
		}
		if seen[rs] == nil {
			seen[rs] = map[rowKey]bool{}
		}
		seen[rs][k] = true
		rw, err := rowOf(g)
		if err != nil {
			return nil, err
		}
		i, ok := idx[rs]
		if !ok {
			i = len(groups)
			idx[rs] = i
			groups = append(groups, runRows{run: rs})
		}
		groups[i].rows = append(groups[i].rows, rw)
		nrows++
	}
	var ids []string
	if nrows == 0 {
		s.st.advanceKey(r.Key, last+1)
		if err := s.st.writeCheckpoint(); err != nil {
			return nil, fmt.Errorf("sink: write checkpoint: %w", err)
		}
	} else {
		shards, err := s.st.commitFlushKey(r.Key, first, last, groups, s.cfg.RowGroupRows)
		if err != nil {
			return nil, err
		}
		for _, g := range groups {
			for _, rw := range g.rows {
				s.met.turns.WithLabelValues(rw.StopReason).Inc()
				s.turns[rw.StopReason]++
			}
		}
		for _, sh := range shards {
			s.met.rowsWritten.Add(float64(sh.entry.Rows))
			s.met.tokensWritten.Add(float64(sh.entry.Tokens))
			s.met.shardsWritten.Inc()
			s.met.shardBytes.Add(float64(sh.entry.Bytes))
			ids = append(ids, sh.ids...)
			s.log.Info("shard written from the journal of an earlier incarnation of the topic", "run", sh.run.info.DirName(),
				"shard", sh.entry.File, "rows", sh.entry.Rows, "tokens", sh.entry.Tokens, "bytes", sh.entry.Bytes)
		}
	}
	s.log.Info("journal recovered: rows written into shards", "topic", r.Key.Topic, "partition", r.Key.Partition,
		"topic_id", r.Key.Log, "rows", nrows, "offsets", fmt.Sprintf("%d-%d", first, last), "bytes", r.Size, "torn_bytes", r.Torn)
	return ids, nil
}

// journalGeneration decodes a journaled record; it was valid when it was absorbed.
func journalGeneration(r *journal.Recovered, en journal.Entry) (*topics.Generation, error) {
	var g topics.Generation
	if err := topics.Unmarshal(en.Value, &g); err != nil {
		return nil, fmt.Errorf("sink: journal of %s/%d holds a record at offset %d that does not decode: %w", r.Key.Topic, r.Key.Partition, en.Offset, err)
	}
	if g.InShards != "" {
		return &g, nil // a turn generate skipped: no token ids
	}
	if reason := validate(&g); reason != "" {
		return nil, fmt.Errorf("sink: journal of %s/%d holds an invalid record at offset %d: %s", r.Key.Topic, r.Key.Partition, en.Offset, reason)
	}
	return &g, nil
}
