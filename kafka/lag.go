package kafka

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// lagGauge keeps, for each partition a Consumer owns, the high watermark its last fetch reported and the
// offset it committed last, and exports their difference as draftflow_consumer_lag: the records of the
// partition this group has not finished yet, as of the last fetch. A partition given up drops its series
// (the next owner exports it).
type lagGauge struct {
	topic, group string
	g            *prometheus.GaugeVec

	mu        sync.Mutex
	hw        map[int]int64 // partition -> high watermark of the last fetch
	committed map[int]int64 // partition -> next offset to read, as committed (or as first fetched)
}

func newLagGauge(met *plumbing, topic, group string) *lagGauge {
	return &lagGauge{topic: topic, group: group, g: met.lag, hw: map[int]int64{}, committed: map[int]int64{}}
}

// fetched records a fetched record's offset and the partition's high watermark it came with.
func (l *lagGauge) fetched(part int, offset, highWater int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.committed[part]; !ok {
		l.committed[part] = offset // nothing committed by this member yet: the group's position is here
	}
	if highWater > l.hw[part] {
		l.hw[part] = highWater
	}
	l.setLocked(part)
}

// commit records committed offsets (partition -> next offset to read).
func (l *lagGauge) commit(offsets map[int]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for part, off := range offsets {
		l.committed[part] = off
		if off > l.hw[part] {
			l.hw[part] = off
		}
		l.setLocked(part)
	}
}

func (l *lagGauge) setLocked(part int) {
	l.g.WithLabelValues(l.topic, l.group, strconv.Itoa(part)).Set(float64(max(0, l.hw[part]-l.committed[part])))
}

// forget drops the partitions this member gave up.
func (l *lagGauge) forget(parts []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, part := range parts {
		delete(l.hw, part)
		delete(l.committed, part)
		l.g.DeleteLabelValues(l.topic, l.group, strconv.Itoa(part))
	}
}
