package admission

import (
	"errors"
	"net/http"
	"strings"

	"github.com/draftflow/draftflow/sglang"
)

// outcome kinds of a failed attempt.
const (
	outcomeReject        = iota // permanent: dead-letter the record
	outcomeServerError          // HTTP 500 or a server-side abort: retry, a bounded number of times
	outcomeBusy                 // 503, 429, 408, 502, 504, an abort without status: retry
	outcomeConnection           // transport error or timeout: retry, count against the endpoint
	outcomeMisconfigured        // other 4xx: retry, loudly
)

// classify maps an attempt's error to what to do about it, with the reason to record.
func classify(err error) (int, string) {
	var se *sglang.StatusError
	var ab *sglang.AbortedError
	var ir *sglang.InvalidResponseError
	switch {
	case errors.As(err, &se):
		switch {
		case se.Code == http.StatusBadRequest && strings.Contains(se.Message, "Duplicate request ID"):
			// Another replica runs the same record (a redelivery); the next attempt has a fresh rid.
			return outcomeBusy, se.Message
		case se.Code == http.StatusBadRequest || se.Code == http.StatusRequestEntityTooLarge ||
			se.Code == http.StatusUnprocessableEntity:
			return outcomeReject, se.Message
		case se.Code == http.StatusServiceUnavailable || se.Code == http.StatusTooManyRequests ||
			se.Code == http.StatusRequestTimeout || se.Code == http.StatusBadGateway ||
			se.Code == http.StatusGatewayTimeout:
			return outcomeBusy, se.Message
		case se.Code >= 500:
			return outcomeServerError, se.Message
		}
		return outcomeMisconfigured, se.Message
	case errors.As(err, &ab):
		reason := ab.Message
		if reason == "" {
			reason = "aborted by the server"
		}
		switch code := ab.StatusCode; {
		case code == 0:
			// No status: the server ended the request for its own reasons (abort_all, pause_generation, a
			// weight update), not because of the request. Run it again.
			return outcomeBusy, reason
		case code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests ||
			code == http.StatusRequestTimeout || code == http.StatusBadGateway || code == http.StatusGatewayTimeout:
			return outcomeBusy, reason
		case code >= 500:
			return outcomeServerError, reason
		}
		// A 4xx status: the request itself is at fault (invalid grammar, too long, ...).
		return outcomeReject, reason
	case errors.As(err, &ir):
		return outcomeReject, ir.Error()
	}
	return outcomeConnection, err.Error()
}
