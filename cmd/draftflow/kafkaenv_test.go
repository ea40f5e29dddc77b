package main

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/sink"
	"github.com/draftflow/draftflow/stages/generate"
)

// TestBrokersFromEnv: --brokers wins; without it DRAFTFLOW_BROKERS is the list.
func TestBrokersFromEnv(t *testing.T) {
	brokers := func(args ...string) []string {
		t.Helper()
		var c common
		if _, _, err := load(sinkFlags(&c, &sink.Config{}), args); err != nil {
			t.Fatal(err)
		}
		return kafka.ParseBrokers(c.brokers)
	}
	t.Setenv(envBrokers, " a:1, b:2 ,")
	if got := brokers(); !reflect.DeepEqual(got, []string{"a:1", "b:2"}) {
		t.Errorf("from %s: %v", envBrokers, got)
	}
	if got := brokers("--brokers", "c:3"); !reflect.DeepEqual(got, []string{"c:3"}) {
		t.Errorf("--brokers c:3: %v", got)
	}
	t.Setenv(envBrokers, "")
	if got := brokers(); got != nil {
		t.Errorf("neither set: %v", got)
	}
}

// TestAPIKeyFromEnv: DRAFTFLOW_SGLANG_API_KEY is generate's API key unless --sglang-api-key-file names one, and the
// flag's help says so.
func TestAPIKeyFromEnv(t *testing.T) {
	t.Setenv(envSGLangAPIKey, " from-env \n")
	var cfg generate.Config
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	registerGenerateFlags(fs, &cfg)
	if cfg.APIKey.Reveal() != "from-env" {
		t.Fatalf("APIKey %q from the environment", cfg.APIKey.Reveal())
	}
	if f := fs.Lookup("sglang-api-key-file"); f == nil || !strings.HasSuffix(f.Usage, "(else $"+envSGLangAPIKey+")") {
		t.Errorf("--sglang-api-key-file help does not name %s: %+v", envSGLangAPIKey, f)
	}
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--sglang-api-key-file", path}); err != nil {
		t.Fatal(err)
	}
	if cfg.APIKey.Reveal() != "from-file" {
		t.Errorf("APIKey %q, want the file's", cfg.APIKey.Reveal())
	}
	// The flag set of `draftflow run` keeps the help.
	var c common
	var rc pipeline.Config
	var mergeTurns string
	rfs, err := runFlags(&c, &rc, &mergeTurns).FlagSet()
	if err != nil {
		t.Fatal(err)
	}
	if f := rfs.Lookup("sglang-api-key-file"); f == nil || !strings.Contains(f.Usage, envSGLangAPIKey) {
		t.Errorf("run's --sglang-api-key-file help: %+v", f)
	}
}
