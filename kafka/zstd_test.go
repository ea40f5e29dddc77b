package kafka

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	kgzstd "github.com/segmentio/kafka-go/compress/zstd"
)

// batchLike returns n bytes shaped like a record batch: keys, small headers and token ids, partly repeating.
func batchLike(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "conv-%08x\x00", r.Uint32())
		for range 200 {
			v := r.IntN(3000)
			if r.IntN(4) == 0 {
				v = 7
			}
			b.Write([]byte{byte(v), byte(v >> 8), 0, 0})
		}
	}
	return b.Bytes()[:n]
}

func compressWith(t testing.TB, newWriter func(io.Writer) io.WriteCloser, src []byte) []byte {
	var out bytes.Buffer
	w := newWriter(&out)
	for off := 0; off < len(src); off += 4096 { // kafka-go writes a batch record by record
		if _, err := w.Write(src[off:min(off+4096, len(src))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestZstdCodecInteroperates(t *testing.T) {
	var theirs kgzstd.Codec
	for _, n := range []int{0, 1, 1000, 130_000, 3 << 20, 8 << 20} {
		src := batchLike(n, uint64(n))
		ours := compressWith(t, zstdCodec{}.NewWriter, src)
		// Any zstd reader reads our frames: kafka-go's own codec and a plain stream decoder.
		got, err := io.ReadAll(theirs.NewReader(bytes.NewReader(ours)))
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("%d bytes: kafka-go's reader: err %v, equal %v", n, err, bytes.Equal(got, src))
		}
		d, _ := zstd.NewReader(bytes.NewReader(ours))
		got, err = io.ReadAll(d)
		d.Close()
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("%d bytes: stream decoder: err %v", n, err)
		}
		// And we read frames kafka-go's codec (other clients' settings: 8 MiB window, streamed) writes.
		frames := compressWith(t, theirs.NewWriter, src)
		got, err = io.ReadAll(zstdCodec{}.NewReader(bytes.NewReader(frames)))
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("%d bytes: our reader of kafka-go's frames: err %v", n, err)
		}
		if n >= 130_000 && len(ours) > len(frames)*105/100 {
			t.Errorf("%d bytes: ours %d compressed bytes, kafka-go's %d: more than 5%% larger", n, len(ours), len(frames))
		}
	}
}

func TestZstdCodecCorruptBatch(t *testing.T) {
	src := compressWith(t, zstdCodec{}.NewWriter, batchLike(100_000, 3))
	src[len(src)/2] ^= 0xff
	src = src[:len(src)-7]
	r := zstdCodec{}.NewReader(bytes.NewReader(src))
	if _, err := io.ReadAll(r); err == nil {
		t.Fatal("a corrupt batch decoded without error")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 1)); err == nil {
		t.Fatal("read after Close succeeded")
	}
}

// BenchmarkZstdBatches compresses 1 MiB batches on 8 goroutines (a producer's partitions), as kafka-go does,
// with kafka-go's codec and with zstdCodec; compare B/op and the peak heap in use (heap-MiB) side by side.
func BenchmarkZstdBatches(b *testing.B) {
	src := batchLike(1<<20, 9)
	var theirs kgzstd.Codec
	for _, c := range []struct {
		name string
		w    func(io.Writer) io.WriteCloser
	}{{"kafka-go", theirs.NewWriter}, {"draftflow", zstdCodec{}.NewWriter}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(src)))
			var out int
			peak := samplePeakHeap()
			for b.Loop() {
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() { out = len(compressWith(b, c.w, src)) })
				}
				wg.Wait()
			}
			b.ReportMetric(float64(len(src))/float64(out), "ratio")
			b.ReportMetric(peak(), "heap-MiB")
		})
	}
}

// samplePeakHeap collects garbage, then samples the Go heap in use (what the process holds, pooled buffers
// included) every 2 ms until the returned function is called; that returns the peak in MiB.
func samplePeakHeap() (stop func() float64) {
	runtime.GC()
	var peak uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() float64 {
		close(done)
		<-sampled
		return float64(peak) / (1 << 20)
	}
}
