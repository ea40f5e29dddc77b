package loop

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// naive is the reference: the first prefix length at which some suffix of the prefix is periodic with a
// period p <= MaxPeriod, at least max(MinTokens, MinRepeats*p) long; with the loop it reports.
func naive(cfg Config, ids []uint32) (Loop, bool) {
	cfg = cfg.WithDefaults()
	for n := 1; n <= len(ids); n++ {
		for p := 1; p <= cfg.MaxPeriod && p < n; p++ {
			// Longest suffix of ids[:n] periodic with p.
			l := p
			for l < n && ids[n-1-l] == ids[n-1-l+p] {
				l++
			}
			if l >= max(cfg.MinTokens, cfg.MinRepeats*p) {
				return Loop{Period: p, Start: n - l, End: n}, true
			}
		}
	}
	return Loop{}, false
}

func repeat(unit []uint32, times int) []uint32 {
	var out []uint32
	for range times {
		out = append(out, unit...)
	}
	return out
}

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func TestDetectsLoopAfterThresholds(t *testing.T) {
	cfg := Config{MaxPeriod: 16, MinRepeats: 4, MinTokens: 40}
	for _, tc := range []struct {
		name   string
		ids    []uint32
		want   bool
		period int
		start  int
		end    int
	}{
		// Period 1: 40 identical tokens after a 10-token prefix; found at the 40th.
		{"period 1", append(seq(100, 10), repeat([]uint32{7}, 60)...), true, 1, 10, 50},
		// Period 5: 40 tokens (8 copies) needed; MinTokens dominates.
		{"period 5", append(seq(100, 3), repeat(seq(1, 5), 20)...), true, 5, 3, 43},
		// Period 16: MinRepeats dominates, 64 tokens.
		{"period 16", append(seq(100, 7), repeat(seq(1, 16), 5)...), true, 16, 7, 71},
		// 39 identical tokens: short of MinTokens.
		{"short run", append(seq(100, 10), append(repeat([]uint32{7}, 39), seq(200, 30)...)...), false, 0, 0, 0},
		// Period 17 is longer than MaxPeriod.
		{"period too long", repeat(seq(1, 17), 10), false, 0, 0, 0},
		// Copies that differ in one token every time restart the count.
		{"near copies", func() []uint32 {
			var out []uint32
			for i := range 30 {
				out = append(out, 1, 2, 3, uint32(1000+i))
			}
			return out
		}(), false, 0, 0, 0},
		{"distinct", seq(0, 5000), false, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ok, err := Scan(cfg, tc.ids)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.want {
				t.Fatalf("found %v (%+v), want %v", ok, l, tc.want)
			}
			if ok && (l.Period != tc.period || l.Start != tc.start || l.End != tc.end) {
				t.Fatalf("loop %+v, want period %d start %d end %d", l, tc.period, tc.start, tc.end)
			}
			if nl, nok := naive(cfg, tc.ids); nok != ok || nl != l {
				t.Fatalf("naive %+v %v, detector %+v %v", nl, nok, l, ok)
			}
		})
	}
}

func TestFeedAndPushAgree(t *testing.T) {
	ids := append(seq(100, 50), repeat(seq(1, 9), 100)...)
	d, _ := New(Config{})
	at := -1
	for i := 0; i < len(ids); i += 37 {
		if k := d.Feed(ids[i:min(i+37, len(ids))]); k >= 0 && at < 0 {
			at = i + k
		}
	}
	l, ok := d.Found()
	if !ok || at != l.End-1 || d.Seen() != len(ids) {
		t.Fatalf("found %v at %d, loop %+v, seen %d", ok, at, l, d.Seen())
	}
	// Default thresholds: period 9, 256 tokens from index 50.
	if l.Period != 9 || l.Start != 50 || l.End != 50+256 {
		t.Fatalf("loop %+v", l)
	}
	if l.Repeats() < DefaultMinRepeats {
		t.Fatalf("repeats %v", l.Repeats())
	}
	d.Reset()
	if _, ok := d.Found(); ok || d.Seen() != 0 || d.Feed(seq(0, 1000)) != -1 {
		t.Fatal("Reset did not forget")
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{{MaxPeriod: -1}, {MinRepeats: 1}, {MinTokens: -5}, {MaxPeriod: 1 << 20}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := New(Config{}); err != nil {
		t.Fatal(err)
	}
}

func TestRandomAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		cfg := Config{MaxPeriod: 1 + rng.IntN(12), MinRepeats: 2 + rng.IntN(4), MinTokens: 1 + rng.IntN(30)}
		ids := randomReply(rng, 200)
		l, ok, _ := Scan(cfg, ids)
		if nl, nok := naive(cfg, ids); nok != ok || nl != l {
			t.Fatalf("cfg %+v ids %v: naive %+v %v, detector %+v %v", cfg, ids, nl, nok, l, ok)
		}
	}
}

// randomReply mixes random tokens from a small vocabulary with repeated units, so that loops of every
// period, near misses and runs cut short all occur.
func randomReply(rng *rand.Rand, n int) []uint32 {
	var out []uint32
	for len(out) < n {
		if rng.IntN(3) == 0 {
			unit := make([]uint32, 1+rng.IntN(8))
			for i := range unit {
				unit[i] = uint32(rng.IntN(4))
			}
			out = append(out, repeat(unit, 1+rng.IntN(10))...)
		} else {
			out = append(out, uint32(rng.IntN(6)))
		}
	}
	return out[:n]
}

func FuzzDetector(f *testing.F) {
	f.Add([]byte{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}, uint8(3), uint8(2), uint8(5))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0}, uint8(1), uint8(4), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, maxPeriod, minRepeats, minTokens uint8) {
		cfg := Config{MaxPeriod: 1 + int(maxPeriod%32), MinRepeats: 2 + int(minRepeats%6), MinTokens: 1 + int(minTokens%64)}
		ids := make([]uint32, 0, len(data)/2+1)
		for i := 0; i+1 < len(data); i += 2 {
			ids = append(ids, uint32(binary.LittleEndian.Uint16(data[i:]))%8)
		}
		l, ok, err := Scan(cfg, ids)
		if err != nil {
			t.Fatal(err)
		}
		if nl, nok := naive(cfg, ids); nok != ok || nl != l {
			t.Fatalf("cfg %+v: naive %+v %v, detector %+v %v", cfg, nl, nok, l, ok)
		}
		if ok {
			tail := ids[l.Start:l.End]
			for i := l.Period; i < len(tail); i++ {
				if tail[i] != tail[i-l.Period] {
					t.Fatalf("loop %+v is not periodic", l)
				}
			}
		}
	})
}

// BenchmarkPush measures the Detector's cost per token at the default thresholds on a reply without a loop
// (every period is checked for every token: the worst case).
func BenchmarkPush(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	ids := make([]uint32, 10240)
	for i := range ids {
		ids[i] = uint32(rng.IntN(150000))
	}
	d, _ := New(Config{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(ids) == 0 {
			d.Reset()
		}
		d.Push(ids[i%len(ids)])
	}
}
