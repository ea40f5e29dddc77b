package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// BenchmarkEngineReferenceRun measures how fast the engine simulates the
// reference run's steady state (150 in flight, 1K prompts, 3K outputs).
func BenchmarkEngineReferenceRun(b *testing.B) {
	for i := 0; i < b.N; i++ {
		cfg := Config{Seed: int64(i)}.withDefaults()
		e := newEngine(&cfg)
		f := closedLoop(b, e, 150, 1024, 10240, 600, uint64(i))
		b.ReportMetric(float64(e.stats.generated), "sim_tokens/op")
		b.ReportMetric(f.tokPerSec, "sim_tok/s")
	}
}

// BenchmarkInstantHTTP measures end-to-end HTTP throughput in Instant mode:
// 64 concurrent clients, 512-token prompts, 256-token outputs.
func BenchmarkInstantHTTP(b *testing.B) {
	s, err := New(Config{Instant: true, Logger: discardLogger(), OutputLenMean: 256, OutputLenDistribution: DistFixed})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	srv := &http.Server{Handler: s}
	ln, addr := listenLocal(b)
	go srv.Serve(ln)
	defer srv.Close()
	ids := make([]int, 512)
	for i := range ids {
		ids[i] = i
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ResetTimer()
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				body, _ := json.Marshal(map[string]any{"input_ids": ids, "rid": fmt.Sprint("b", i)})
				resp, err := client.Post("http://"+addr+"/generate", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	for i := 0; i < b.N; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	b.ReportMetric(float64(s.Stats().GeneratedTokens)/b.Elapsed().Seconds(), "wall_tok/s")
}

func listenLocal(b *testing.B) (net.Listener, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return ln, ln.Addr().String()
}
