package main

import (
	"strings"
	"testing"
)

// TestDispatch: every benchmark is listed and answers -h with its flags; no benchmark, or an unknown one, is
// a usage error.
func TestDispatch(t *testing.T) {
	var usage strings.Builder
	if code := run(nil, &usage); code != 2 {
		t.Fatalf("no benchmark: exit %d, want 2", code)
	}
	for _, c := range commands() {
		if !strings.Contains(usage.String(), "\n  "+c.Name+"  ") {
			t.Errorf("usage does not list %s:\n%s", c.Name, usage.String())
		}
		var out strings.Builder
		if code := run([]string{c.Name, "-h"}, &out); code != 0 {
			t.Errorf("%s -h: exit %d, want 0", c.Name, code)
		}
	}
	var out strings.Builder
	if code := run([]string{"frobnicate"}, &out); code != 2 || !strings.Contains(out.String(), `unknown benchmark "frobnicate"`) {
		t.Fatalf("unknown benchmark: exit %d, %q", code, out.String())
	}
	if code := run([]string{"generate", "--no-such-flag"}, &out); code != 1 {
		t.Fatalf("an unknown flag: exit %d, want 1", code)
	}
}

// TestDraftflowBesideThis: without --draftflow the live benchmark looks for draftflow beside itself, and
// says how to get it there when it is missing.
func TestDraftflowBesideThis(t *testing.T) {
	if _, err := besideThis("no-such-program"); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("got %v, want an error that says make build puts it there", err)
	}
}
