package tokenizer

import "math/bits"

// pairMap is an open-addressing hash table from a symbol pair (left<<32 | right) to a merge
// (rank<<32 | merged id); the BPE inner loop spends most of its time here, and this is several
// times faster than a Go map for uint64 keys.
type pairMap struct {
	slots []pairSlot
	shift uint8
	n     int
}

type pairSlot struct{ k, v uint64 }

const emptyPair = ^uint64(0)

func newPairMap(n int) *pairMap {
	size := 1 << bits.Len(uint(n*2+16))
	m := &pairMap{slots: make([]pairSlot, size), shift: uint8(64 - bits.TrailingZeros(uint(size)))}
	for i := range m.slots {
		m.slots[i].k = emptyPair
	}
	return m
}

func (m *pairMap) index(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> m.shift }

// put sets k to v, replacing an existing value (later merges win, as in HF's HashMap collect).
func (m *pairMap) put(k, v uint64) {
	if (m.n+1)*2 > len(m.slots) {
		m.grow()
	}
	mask := uint64(len(m.slots) - 1)
	for i := m.index(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.k == emptyPair {
			s.k, s.v = k, v
			m.n++
			return
		}
		if s.k == k {
			s.v = v
			return
		}
	}
}

func (m *pairMap) grow() {
	old := m.slots
	*m = *newPairMap(len(old))
	for _, s := range old {
		if s.k != emptyPair {
			m.put(s.k, s.v)
		}
	}
}

func (m *pairMap) get(k uint64) (uint64, bool) {
	mask := uint64(len(m.slots) - 1)
	for i := m.index(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.k == k {
			return s.v, true
		}
		if s.k == emptyPair {
			return 0, false
		}
	}
}
