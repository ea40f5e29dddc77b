package generate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"

	"github.com/draftflow/draftflow/sglang/sim"
)

// simNet is the benchmark's network: an http.RoundTripper that hands each request of the stage's Client to
// the simulated server it names ("http://sim-<i>.invalid:30000"), calling the server's real HTTP handler
// in-process. A slot without a running server (down, or not started yet) refuses connections, and taking a
// server down resets the connections of the calls it is serving, as a crashed SGLang does.
type simNet struct {
	mu       sync.Mutex
	slots    []*netSlot
	handlers sync.WaitGroup // the servers' handlers still serving calls
}

type netSlot struct {
	srv  *sim.Server   // nil while down
	gone chan struct{} // closed when srv goes down
}

func newSimNet(n int) *simNet {
	n2 := &simNet{}
	for range n {
		n2.slots = append(n2.slots, &netSlot{})
	}
	return n2
}

// url is the base URL of slot i.
func slotURL(i int) string { return fmt.Sprintf("http://sim-%d.invalid:30000", i) }

// up puts s in slot i.
func (n *simNet) up(i int, s *sim.Server) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.slots[i] = &netSlot{srv: s, gone: make(chan struct{})}
}

// down takes slot i's server away: calls in progress fail with a connection reset, new ones are refused.
func (n *simNet) down(i int) *sim.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	sl := n.slots[i]
	if sl.srv != nil {
		close(sl.gone)
	}
	n.slots[i] = &netSlot{}
	return sl.srv
}

// wait waits for the handlers of every call made: the caller closes the servers first (a closed server ends
// its calls).
func (n *simNet) wait() { n.handlers.Wait() }

// server returns slot i's server, or nil.
func (n *simNet) server(i int) *sim.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.slots[i].srv
}

// RoundTrip serves req with the named slot's handler.
func (n *simNet) RoundTrip(req *http.Request) (*http.Response, error) {
	var i int
	if _, err := fmt.Sscanf(req.URL.Host, "sim-%d.invalid:30000", &i); err != nil || i < 0 || i >= len(n.slots) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no such host " + req.URL.Host)}
	}
	n.mu.Lock()
	sl := n.slots[i]
	n.mu.Unlock()
	if sl.srv == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	sreq := httptest.NewRequestWithContext(req.Context(), req.Method, req.URL.String(), bytes.NewReader(body))
	sreq.Header = req.Header.Clone()
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	n.handlers.Go(func() {
		defer close(done)
		sl.srv.ServeHTTP(rec, sreq)
	})
	select {
	case <-done:
		return rec.Result(), nil
	case <-sl.gone:
		// The server died: its handler never answers (the benchmark drops the server), the connection resets.
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	case <-req.Context().Done():
		// A client that gives up disconnects (the server aborts the request when its pass ends).
		return nil, req.Context().Err()
	}
}
