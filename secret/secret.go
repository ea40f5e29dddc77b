// Package secret holds credentials (a Kafka SASL password, an SGLang API key) so that no config that
// carries one can echo it: a Value prints under every fmt verb, logs (log/slog) and marshals (JSON,
// text) as "[redacted]", or as "" when empty. Only Reveal returns the credential itself.
package secret

import (
	"fmt"
	"log/slog"
	"strconv"
)

// Value is a credential. The zero Value is empty.
type Value struct{ value string }

// New wraps a credential.
func New(s string) Value { return Value{value: s} }

// Reveal returns the credential itself: only for handing it to the client library or the wire.
func (s Value) Reveal() string { return s.value }

// IsZero reports whether the credential is empty.
func (s Value) IsZero() bool { return s.value == "" }

// String redacts the credential.
func (s Value) String() string {
	if s.value == "" {
		return ""
	}
	return "[redacted]"
}

// Format redacts the credential under every fmt verb (%v, %+v, %#v, %s, %q, %x, %d ...).
func (s Value) Format(f fmt.State, verb rune) {
	if verb == 'q' || (verb == 'v' && f.Flag('#')) {
		fmt.Fprint(f, strconv.Quote(s.String()))
		return
	}
	fmt.Fprint(f, s.String())
}

// LogValue redacts the credential in log/slog output.
func (s Value) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText redacts the credential in JSON and text encodings.
func (s Value) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
