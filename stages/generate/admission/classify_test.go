package admission

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/sglang"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind int
	}{
		{&sglang.StatusError{Code: 400, Message: "x"}, outcomeReject},
		{&sglang.StatusError{Code: 400, Message: "Duplicate request ID: a"}, outcomeBusy},
		{&sglang.StatusError{Code: 503}, outcomeBusy},
		{&sglang.StatusError{Code: 500}, outcomeServerError},
		{&sglang.StatusError{Code: 404}, outcomeMisconfigured},
		{&sglang.AbortedError{Message: "oom", StatusCode: 500}, outcomeServerError},
		{&sglang.AbortedError{Message: "bad", StatusCode: 400}, outcomeReject},
		{&sglang.AbortedError{Message: "bad", StatusCode: 422}, outcomeReject},
		{&sglang.AbortedError{Message: "queue timeout", StatusCode: 503}, outcomeBusy},
		{&sglang.AbortedError{Message: "Abort all requests"}, outcomeBusy}, // abort_all, pause_generation, weight update
		{&sglang.AbortedError{Message: "Abort before prefill"}, outcomeBusy},
		{&sglang.InvalidResponseError{Reason: "x"}, outcomeReject},
		{errors.New("connection reset by peer"), outcomeConnection},
	} {
		if k, _ := classify(tc.err); k != tc.kind {
			t.Errorf("classify(%v) = %d, want %d", tc.err, k, tc.kind)
		}
	}
}

func TestRequestIDsArePrefixFree(t *testing.T) {
	rids := []string{AttemptRID(RequestID("a1", 0), 1), AttemptRID(RequestID("a1", 0), 10), AttemptRID(RequestID("a10", 0), 1),
		AttemptRID(RequestID("a1", 1), 1), AttemptRID(RequestID("a1", 10), 1),
		// Ids holding the separators themselves: "x"'s first attempt must not be a prefix of these.
		AttemptRID(RequestID("x#0.1;y", 0), 1), AttemptRID(RequestID("x#0.1;", 0), 1), AttemptRID(RequestID("x", 0), 1),
		AttemptRID(RequestID("x%3B", 0), 1), AttemptRID(RequestID("x;", 0), 1)}
	for i, a := range rids {
		for j, b := range rids {
			if i != j && strings.HasPrefix(b, a) {
				t.Errorf("rid %q is a prefix of %q", a, b)
			}
		}
	}
}

// testLogger sends a test's logs to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
