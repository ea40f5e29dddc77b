package kafka

import "sync"

// watermark tracks, per partition, which fetched offsets are finished, and yields the offset up to which
// everything is finished: the only offset that may be committed when work completes out of order.
//
// Offsets must be added in fetch order (increasing per partition). Adding an offset at or below the last one
// added for a partition means the consumer was rewound (a rebalance handed the partition back from its
// committed offset): the partition's pending offsets are forgotten, and Done for them is ignored.
type watermark struct {
	mu     sync.Mutex
	parts  map[int]*partitionMarks
	epochs uint64 // the last epoch handed out; every new or rewound partition gets a fresh one
}

type partitionMarks struct {
	epoch     uint64
	base      int64   // offset of pending[0]
	pending   []uint8 // state of offset base+i: inFlight, finished or abandoned
	last      int64   // last offset added, -1 if none
	committed int64   // highest finished offset already reported by Advance, -1 if none
	finished  int64   // highest offset of the finished prefix, -1 if none
	// reportedDone is how many finished offsets after the prefix the last Commit reported.
	reportedDone int
}

// States of a pending offset.
const (
	inFlight  uint8 = iota
	finished        // Done: may be committed
	abandoned       // Abandon: never committed by this consumer, but no longer waited for
)

// mark identifies one added offset; pass it back to Done.
type mark struct {
	Partition int
	Offset    int64
	epoch     uint64
}

// newWatermark returns an empty watermark.
func newWatermark() *watermark { return &watermark{parts: make(map[int]*partitionMarks)} }

// Add registers a fetched offset as in progress.
func (w *watermark) Add(partition int, offset int64) mark {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.parts[partition]
	if p == nil {
		// The reader starts here because everything before is committed already.
		w.epochs++
		p = &partitionMarks{epoch: w.epochs, last: -1, committed: offset - 1, finished: offset - 1}
		w.parts[partition] = p
	}
	if p.last >= 0 && offset <= p.last {
		// Rewound: forget what was pending; those deliveries will come again.
		w.epochs++
		p.epoch = w.epochs
		p.pending = p.pending[:0]
		p.finished = offset - 1
		if p.committed > p.finished {
			p.committed = p.finished
		}
	}
	if len(p.pending) == 0 {
		p.base = offset
		if p.finished < offset-1 {
			// Offsets may skip (compaction, transaction markers): everything before the first
			// pending offset counts as finished.
			p.finished = offset - 1
		}
	} else {
		// Fill gaps in fetched offsets (control records are never delivered) as finished.
		for next := p.base + int64(len(p.pending)); next < offset; next++ {
			p.pending = append(p.pending, finished)
		}
	}
	p.pending = append(p.pending, inFlight)
	p.last = offset
	return mark{Partition: partition, Offset: offset, epoch: p.epoch}
}

// Done marks an offset finished. It reports false when the mark is stale (its partition was rewound since).
func (w *watermark) Done(m mark) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.parts[m.Partition]
	if p == nil || p.epoch != m.epoch {
		return false
	}
	i := m.Offset - p.base
	if i < 0 || i >= int64(len(p.pending)) {
		return false
	}
	p.pending[i] = finished
	n := 0
	for n < len(p.pending) && p.pending[n] == finished {
		n++
	}
	if n > 0 {
		p.finished = p.base + int64(n) - 1
		p.pending = append(p.pending[:0], p.pending[n:]...)
		p.base += int64(n)
	}
	return true
}

// Advance returns, for each partition whose finished prefix grew since the last call, the highest finished
// offset (commit that offset + 1). It is what a committer calls periodically.
func (w *watermark) Advance() map[int]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out map[int]int64
	for part, p := range w.parts {
		if p.finished > p.committed {
			if out == nil {
				out = make(map[int]int64)
			}
			out[part] = p.finished
			p.committed = p.finished
		}
	}
	return out
}

// Retreat undoes an Advance whose commit failed, so the offsets are offered again by the next Advance.
func (w *watermark) Retreat(partition int, offset int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.parts[partition]; p != nil {
		p.reportedDone = -1 // the finished offsets after the prefix are offered again too
		if p.committed >= offset {
			p.committed = offset - 1
		}
	}
}

// Abandon marks an offset given up: it is never committed (nor anything after it) and no longer counts as
// pending. A stale mark is ignored.
func (w *watermark) Abandon(m mark) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.parts[m.Partition]
	if p == nil || p.epoch != m.epoch {
		return
	}
	if i := m.Offset - p.base; i >= 0 && i < int64(len(p.pending)) && p.pending[i] == inFlight {
		p.pending[i] = abandoned
	}
}

// PendingOf returns how many added offsets of the given partitions are still in flight (neither finished nor
// abandoned).
func (w *watermark) PendingOf(parts []int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, part := range parts {
		if p := w.parts[part]; p != nil {
			for _, st := range p.pending {
				if st == inFlight {
					n++
				}
			}
		}
	}
	return n
}

// Forget drops a partition (it was given up, or is taken anew from its committed offset) and returns how many
// of its offsets were not finished. Done and Abandon of its marks are ignored from now on.
func (w *watermark) Forget(partition int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.parts[partition]
	if p == nil {
		return 0
	}
	n := 0
	for _, st := range p.pending {
		if st != finished {
			n++
		}
	}
	delete(w.parts, partition)
	return n
}

// Pending returns how many added offsets are not yet finished, over all partitions.
func (w *watermark) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, p := range w.parts {
		for _, st := range p.pending {
			if st == inFlight {
				n++
			}
		}
	}
	return n
}

// Commit returns, for each of the given partitions with marks, the offset to commit (the first offset not
// finished) and the finished offsets after it (in order), and records them as reported. changed is false when
// neither moved since the last call, so there is nothing new to commit.
func (w *watermark) Commit(parts []int) (offsets map[int]int64, done map[int][]int64, changed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	offsets, done = map[int]int64{}, map[int][]int64{}
	for _, part := range parts {
		p := w.parts[part]
		if p == nil {
			continue
		}
		offsets[part] = p.finished + 1
		var d []int64
		for i, st := range p.pending {
			if st == finished {
				d = append(d, p.base+int64(i))
			}
		}
		done[part] = d
		if p.finished > p.committed || len(d) != p.reportedDone {
			changed = true
		}
		p.committed, p.reportedDone = p.finished, len(d)
	}
	return offsets, done, changed
}
