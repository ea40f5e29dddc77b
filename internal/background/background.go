// Package background runs goroutines that their owner waits for before it returns (a Close), where a goroutine
// may start while the owner already waits: from a client library's callback, or from another such goroutine.
// A sync.WaitGroup forbids that (an Add with a zero counter must happen before Wait); a Group allows it.
package background

import "sync"

// Group counts its running goroutines. The zero value is ready to use; a Group must not be copied after use.
type Group struct {
	mu   sync.Mutex
	n    int
	idle sync.Cond // signalled when n drops to 0; its L is mu
}

// Go runs f on a new goroutine that Wait waits for.
func (g *Group) Go(f func()) {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
	go func() {
		defer func() {
			g.mu.Lock()
			if g.n--; g.n == 0 {
				g.idle.Broadcast()
			}
			g.mu.Unlock()
		}()
		f()
	}()
}

// Wait returns once no goroutine of Go is running, those started while it waits included.
func (g *Group) Wait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.idle.L = &g.mu
	for g.n > 0 {
		g.idle.Wait()
	}
}
