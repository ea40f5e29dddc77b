package sim

import (
	"context"
	"flag"
	"net"
	"net/http"
	"reflect"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	// max_running_requests as SGLang 0.5.23 derives it: min(clamp(159277/262144*512, 2048, 4096), 159277/2)
	if c.MaxTotalTokens != 159277 || c.MaxRunningRequests != 2048 || c.DPSize != 1 || c.Release != Release0523 || c.ChunkedPrefillSize != 8192 ||
		c.TimeScale != 1 || c.VocabSize != 151936 || c.SpecialTokenStart != 151643 || c.DefaultMaxNewTokens != 128 {
		t.Fatalf("defaults %+v", c)
	}
	small := Config{MaxTotalTokens: 1000, VocabSize: 500, EOSTokenIDs: []int{2}}.withDefaults()
	if small.MaxRunningRequests != 500 || small.SpecialTokenStart != 0 {
		t.Fatalf("derived %+v", small)
	}
	if err := (Config{VocabSize: 100}).withDefaults().validate(); err == nil {
		t.Fatal("default EOS ids outside a 100-token vocabulary accepted")
	}
	if _, err := New(Config{Faults: Faults{ErrorRate: 2}}); err == nil {
		t.Fatal("error rate 2 accepted")
	}
}

func TestRegisterFlags(t *testing.T) {
	t.Parallel()
	var c Config
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{
		"--max-total-tokens=5000", "--time-scale=1000", "--max-running-requests=7", "--chunked-prefill-size=-1",
		"--max-queued-requests=9", "--context-length=4096", "--vocab-size=32000", "--seed=3", "--error-rate=0.1",
		"--eos-token-ids=2,3", "--crash-every=1h", "--instant", "--decode-base=10ms", "--output-len-dist=fixed",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		MaxTotalTokens: 5000, TimeScale: 1000, MaxRunningRequests: 7, ChunkedPrefillSize: -1, MaxQueuedRequests: 9,
		ContextLength: 4096, VocabSize: 32000, Seed: 3, EOSTokenIDs: []int{2, 3}, Instant: true,
		OutputLenDistribution: DistFixed,
		Timing:                TimeModel{DecodeBase: 10 * time.Millisecond},
		Faults:                Faults{ErrorRate: 0.1, CrashEvery: time.Hour},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", c, want)
	}
}

func TestListenAndServe(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- ListenAndServe(ctx, addr, Config{Instant: true, Logger: discardLogger()}) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never healthy: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("ListenAndServe did not return after cancel")
	}
}
