package secret_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/secret"
)

const credential = "hunter2-very-secret"

// A Value, alone or inside a struct, never shows the credential: not under any fmt verb, not in
// log/slog's text or JSON output, not marshalled; Reveal returns it.
func TestValueNeverPrinted(t *testing.T) {
	t.Parallel()
	v := secret.New(credential)
	holder := struct {
		User string
		Key  secret.Value
	}{"alice", v}
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		outs = append(outs, fmt.Sprintf(verb, v), fmt.Sprintf(verb, holder), fmt.Sprintf(verb, &holder))
	}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var b bytes.Buffer
		slog.New(h(&b)).Info("config", "holder", holder, "key", v)
		outs = append(outs, b.String())
	}
	j, err := json.Marshal(holder)
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(j))
	for _, o := range outs {
		if strings.Contains(o, credential) || strings.Contains(strings.ToLower(o), fmt.Sprintf("%x", credential)) {
			t.Fatalf("credential revealed: %s", o)
		}
	}
	if want := `{"User":"alice","Key":"[redacted]"}`; string(j) != want {
		t.Errorf("JSON = %s, want %s", j, want)
	}
	if got := fmt.Sprintf("%v|%q|%#v", v, v, v); got != `[redacted]|"[redacted]"|"[redacted]"` {
		t.Errorf("printed as %s", got)
	}
	if got := v.Reveal(); got != credential {
		t.Errorf("Reveal = %q", got)
	}
	if v.IsZero() {
		t.Error("IsZero of a set credential")
	}
}

// The empty Value prints as nothing, so a config shows at a glance that no credential is set.
func TestEmptyValue(t *testing.T) {
	t.Parallel()
	var v secret.Value
	if !v.IsZero() || v.Reveal() != "" {
		t.Errorf("zero Value: IsZero %v, Reveal %q", v.IsZero(), v.Reveal())
	}
	if got := fmt.Sprintf("%v|%s|%q", v, v, v); got != `||""` {
		t.Errorf("empty Value printed as %s", got)
	}
	if j, _ := json.Marshal(v); string(j) != `""` {
		t.Errorf("empty Value marshals as %s", j)
	}
	if !secret.New("").IsZero() {
		t.Error("New(\"\") is not zero")
	}
}
