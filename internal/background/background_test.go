package background

import (
	"sync/atomic"
	"testing"
	"time"
)

// Wait waits for every goroutine, those started by other goroutines of the Group while it waits included.
func TestWaitWaitsForGoroutinesStartedWhileWaiting(t *testing.T) {
	var g Group
	var finished atomic.Int32
	release := make(chan struct{})
	g.Go(func() {
		<-release
		g.Go(func() {
			time.Sleep(20 * time.Millisecond)
			finished.Add(1)
		})
		finished.Add(1)
	})
	waited := make(chan struct{})
	go func() {
		g.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		t.Fatal("Wait returned while a goroutine ran")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-waited
	if n := finished.Load(); n != 2 {
		t.Fatalf("Wait returned with %d of 2 goroutines finished", n)
	}
	g.Wait() // nothing running: returns at once
}
