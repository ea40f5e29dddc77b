package main

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestSignalDeliveredTwiceIsOne: SIGTERM to the process and to its group (GNU timeout) arrives twice within
// a moment; that is the first signal, which drains. The same signal a second or more later, or another
// signal, is a second one and exits at once.
func TestSignalDeliveredTwiceIsOne(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second os.Signal
		after  time.Duration
		exits  bool
	}{
		{"echo", syscall.SIGTERM, 20 * time.Millisecond, false},
		{"later", syscall.SIGTERM, 1500 * time.Millisecond, true},
		{"other", os.Interrupt, 20 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The watcher reads the clock once per signal: the first at t0, the next after tc.after, a third
			// two seconds later.
			t0 := time.Unix(1000, 0)
			times := []time.Time{t0, t0.Add(tc.after), t0.Add(tc.after + 2*time.Second)}
			calls := 0
			now := func() time.Time { calls++; return times[min(calls, len(times))-1] }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sig := make(chan os.Signal)
			exited := make(chan int, 1)
			go watchSignals(ctx, cancel, sig, now, func(code int) { exited <- code })
			sig <- syscall.SIGTERM
			<-ctx.Done()
			send := func(s os.Signal) {
				select {
				case sig <- s:
				case code := <-exited:
					t.Fatalf("exit(%d) before %v was sent", code, s)
				}
			}
			send(tc.second)
			if !tc.exits {
				// A later, genuine second signal still exits.
				select {
				case code := <-exited:
					t.Fatalf("exit(%d) on the echo of the first signal", code)
				default:
				}
				send(syscall.SIGTERM)
			}
			select {
			case code := <-exited:
				if code != 130 {
					t.Errorf("exit(%d), want 130", code)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no exit on a second signal")
			}
		})
	}
}
