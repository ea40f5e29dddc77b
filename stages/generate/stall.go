package generate

import (
	"sync"
	"time"

	"github.com/draftflow/draftflow/stages/generate/admission"
)

// StallAfter is how long the stage goes without an answer before requests waiting on full servers count as a
// stall (see Stall.Reason).
const StallAfter = 10 * time.Second

// Stall says why the stage makes no progress, for a progress line or a status record. Run keeps the one
// Config.Stall points at current; its zero value is ready to use, and a nil *Stall says nothing. It is safe for
// concurrent use.
type Stall struct {
	mu        sync.Mutex
	ctl       *admission.Controller
	last      time.Time // the last answer, or when Run started
	answered  int64
	continued int64
	now       func() time.Time // the clock (time.Now when nil)
}

// Reason says why the stage gets no answers, or "" when it does, has nothing waiting, or cannot tell yet: no
// SGLang server is up (at once: each server's URL and why), or requests wait while every server that is up is
// full and none answered for StallAfter.
func (s *Stall) Reason() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	ctl, last, now := s.ctl, s.last, s.clock()
	s.mu.Unlock()
	if ctl == nil {
		return ""
	}
	why := ctl.Stalled()
	if why == "" || ctl.AnyReady() && now.Sub(last) < StallAfter {
		return "" // a full server that answered lately is busy, not stalled
	}
	return why
}

// Answered returns the turns the stage got answers for since Run started and, of them, those whose conversation
// goes on with a later turn.
func (s *Stall) Answered() (answered, continued int64) {
	if s == nil {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered, s.continued
}

// start ties s to the Controller of a Run starting now.
func (s *Stall) start(ctl *admission.Controller) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctl, s.last = ctl, s.clock()
}

// answer counts an answer; continued when its conversation goes on.
func (s *Stall) answer(continued bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = s.clock()
	s.answered++
	if continued {
		s.continued++
	}
}

func (s *Stall) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}
