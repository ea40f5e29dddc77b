package capture

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/draftflow/draftflow/sglang"
)

// TestPermanentErrors: the server's answers about a row (4xx but 408 and 429, an unusable answer) are final
// and make the row go without features; a server that cannot be reached, is overloaded or fails (5xx) is
// retried, so it never makes a row go missing.
func TestPermanentErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&sglang.StatusError{Code: http.StatusBadRequest, Message: "Input length (103 tokens) exceeds the maximum allowed length"}, true},
		{fmt.Errorf("wrapped: %w", &sglang.StatusError{Code: http.StatusRequestEntityTooLarge}), true},
		{&sglang.InvalidResponseError{Reason: "hidden states for 2 of 5 positions"}, true},
		{&sglang.StatusError{Code: http.StatusTooManyRequests}, false},
		{&sglang.StatusError{Code: http.StatusRequestTimeout}, false},
		{&sglang.StatusError{Code: http.StatusServiceUnavailable, Message: "The request queue is full."}, false},
		{&sglang.StatusError{Code: http.StatusInternalServerError}, false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := permanent(tc.err); got != tc.want {
			t.Errorf("permanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestHeaderLayers: the feature files name the aux layers the stage was given, then the final state, and
// DefaultAuxLayers is SGLang's EAGLE-3 choice (2, L/2, L-3).
func TestHeaderLayers(t *testing.T) {
	c := Config{AuxLayers: DefaultAuxLayers(36)}
	h := c.header(4096)
	if fmt.Sprint(h.Layers) != "[aux:2 aux:18 aux:33 final]" || h.Hidden != 4096 || h.Width() != 4*4096 {
		t.Fatalf("header %+v", h)
	}
	if _, err := ParseLayers("2,x"); err == nil {
		t.Error(`ParseLayers("2,x") accepted`)
	}
}
