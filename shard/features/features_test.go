package features

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestToBF16(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80}, {-2, 0xc000}, {0, 0}, {float32(math.Inf(1)), 0x7f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even below
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, even above
		{math.Float32frombits(0x3f808001), 0x3f81}, // above the tie
		{math.Float32frombits(0x7f7fffff), 0x7f80}, // max float32 rounds to +Inf, as torch does
	} {
		var got [1]uint16
		ToBF16(got[:], []float32{c.in})
		if got[0] != c.want {
			t.Errorf("ToBF16(%#x) = %#x, want %#x", math.Float32bits(c.in), got[0], c.want)
		}
	}
	var n [1]uint16
	ToBF16(n[:], []float32{float32(math.NaN())})
	if f := math.Float32frombits(uint32(n[0]) << 16); !math.IsNaN(float64(f)) {
		t.Errorf("NaN became %v", f)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, codec := range []string{CodecZstd, CodecRaw} {
		t.Run(codec, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f.dff")
			h := Header{Hidden: 8, Layers: []string{"aux:1", "aux:2", "final"}, Codec: codec}
			w, err := Create(path, h)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			want := map[string][]float32{}
			for i, tokens := range []int{1, 5, 40} {
				aux := make([]float32, tokens*16)
				fin := make([]float32, tokens*8)
				for j := range aux {
					aux[j] = float32(rng.NormFloat64())
				}
				for j := range fin {
					fin[j] = float32(rng.NormFloat64() * 10)
				}
				id := string(rune('a' + i))
				if err := w.AddLayers(id, tokens, aux, fin); err != nil {
					t.Fatal(err)
				}
				row := make([]float32, 0, tokens*24)
				for tk := 0; tk < tokens; tk++ {
					row = append(append(row, aux[tk*16:(tk+1)*16]...), fin[tk*8:(tk+1)*8]...)
				}
				want[id] = row
			}
			if err := w.Add("a", 1, make([]uint16, 24)); err == nil || !strings.Contains(err.Error(), "twice") {
				t.Fatalf("duplicate id: %v", err)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("file visible before Close: %v", err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if len(r.Index.Rows) != 3 || r.Index.Width() != 24 {
				t.Fatalf("index %+v", r.Index)
			}
			for id, row := range want {
				got, err := r.ReadFloat32(r.Find(id))
				if err != nil {
					t.Fatal(err)
				}
				for j, v := range row {
					// bf16 keeps 8 significant bits: rounding moves a value by at most 2^-8 of itself.
					if d := math.Abs(float64(got[j] - v)); d > math.Abs(float64(v))/256 {
						t.Fatalf("row %s value %d: %v for %v", id, j, got[j], v)
					}
				}
			}
		})
	}
}

func TestDamagedFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.dff")
	w, err := Create(path, Header{Hidden: 4, Layers: []string{"final"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFloat32("r1", 2, []float32{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFloat32("r2", 1, []float32{1, 2, 3}); err == nil {
		t.Fatal("a row of the wrong size was accepted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	cut := filepath.Join(dir, "cut.dff")
	os.WriteFile(cut, data[:len(data)-3], 0o644)
	if _, err := Open(cut); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Fatalf("truncated file: %v", err)
	}
	flip := append([]byte(nil), data...)
	flip[len(Magic)+2] ^= 0xff
	fp := filepath.Join(dir, "flip.dff")
	os.WriteFile(fp, flip, 0o644)
	r, err := Open(fp)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.ReadBF16(0); err == nil || !strings.Contains(err.Error(), "CRC") {
		t.Fatalf("damaged block: %v", err)
	}
}

// BenchmarkAddKimi writes rows of 64 tokens at Kimi-K2's width (3 aux layers + the final state, hidden 7168)
// from float32 values (bf16 rounding included), values N(0, 1) rounded to bf16 as a bf16 server returns
// them, and reports the stored bytes and the CPU per token (user+system: the machines are shared).
func BenchmarkAddKimi(b *testing.B) {
	const tokens, hidden = 64, 7168
	rng := rand.New(rand.NewPCG(3, 4))
	vals := make([]float32, tokens*4*hidden)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
	}
	for _, codec := range []string{CodecZstd, CodecRaw} {
		b.Run(codec, func(b *testing.B) {
			w, err := Create(filepath.Join(b.TempDir(), "f.dff"), Header{Hidden: hidden, Layers: []string{"aux:2", "aux:30", "aux:58", "final"}, Codec: codec})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Abort()
			cpu0 := cpuSeconds()
			n := 0
			for b.Loop() {
				if err := w.AddFloat32(strconv.Itoa(n), tokens, vals); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric((cpuSeconds()-cpu0)/float64(n*tokens), "cpu-s/token")
			b.ReportMetric(float64(w.off-int64(len(Magic)))/float64(n*tokens), "B/token")
		})
	}
}

// cpuSeconds is the process's user+system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// FuzzOpen reads arbitrary bytes as a feature file: never a panic, and a row that reads has its size.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	for _, codec := range []string{CodecZstd, CodecRaw} {
		path := filepath.Join(dir, codec)
		w, err := Create(path, Header{Hidden: 2, Layers: []string{"aux:1", "final"}, Codec: codec})
		if err != nil {
			f.Fatal(err)
		}
		w.AddFloat32("a", 2, []float32{1, 2, 3, 4, 5, 6, 7, 8})
		w.AddFloat32("b", 1, []float32{-1, 0.5, 1e-3, 9})
		if err := w.Close(); err != nil {
			f.Fatal(err)
		}
		data, _ := os.ReadFile(path)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Open(path)
		if err != nil {
			return
		}
		defer r.Close()
		for i, row := range r.Index.Rows {
			if v, err := r.ReadBF16(i); err == nil && len(v) != row.Tokens*r.Index.Width() {
				t.Fatalf("row %d: %d values", i, len(v))
			}
		}
	})
}
