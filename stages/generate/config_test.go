package generate

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/secret"
	"github.com/draftflow/draftflow/stages/generate/admission"
)

func TestFlagsAndLanes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "eps")
	if err := os.WriteFile(file, []byte("# fleet\nhttp://b:30000/\n\nhttp://c:30000 # big\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var c Config
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{"--sglang", "http://a:30000", "--sglang-file", file, "--policy", "fixed", "--concurrency", "150",
		"--lane", "short,max_new_tokens=10240,share=0.75", "--lane", "long,max-new-tokens=16384,datasets=books|papers",
		"--request-timeout", "10m", "--max-timeouts", "5", "--max-new-tokens", "2048"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"http://a:30000", "http://b:30000", "http://c:30000"}
	if !reflect.DeepEqual(c.Endpoints, want) || c.Policy != PolicyFixed || c.Concurrency != 150 ||
		c.RequestTimeout != 10*time.Minute || c.MaxTimeouts != 5 || c.DefaultMaxNewTokens != 2048 || len(c.Lanes) != 2 {
		t.Fatalf("config %+v", c)
	}
	if got := c.Lanes[1].String(); got != "long,max_new_tokens=16384,datasets=books|papers" {
		t.Fatalf("lane %q", got)
	}
	if err := c.withDefaults().validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "x,share=2", "x,max_new_tokens=-1", "x,color=red", "x,share"} {
		if _, err := ParseLane(bad); err == nil {
			t.Errorf("lane %q accepted", bad)
		}
	}
	for _, bad := range []admission.Config{
		{},
		{Endpoints: []string{"a:1"}},
		{Endpoints: []string{"http://a:1", "http://a:1"}},
		{Endpoints: []string{"http://a:1"}, Policy: "magic"},
		{Endpoints: []string{"http://a:1"}, Lanes: []Lane{{Name: "x", Share: 0.7}, {Name: "y", Share: 0.7}}},
	} {
		if err := (Config{Config: bad}).withDefaults().validate(); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}

// A key file given with --sglang-api-key-file replaces a key already set (cmd/draftflow sets it from
// DRAFTFLOW_SGLANG_API_KEY), and a printed Config never shows it (the Controller's TestAPIKeySentNeverLogged checks that it is sent and never
// logged).
func TestAPIKeyFlags(t *testing.T) {
	const key = "s3cret-key-1234"
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Config: admission.Config{APIKey: secret.New("from-env")}}
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--sglang", "http://a:30000", "--sglang-api-key-file", path, "--policy", "fixed"}); err != nil {
		t.Fatal(err)
	}
	if cfg.APIKey.Reveal() != key {
		t.Fatalf("APIKey %q from the file", cfg.APIKey.Reveal())
	}
	if printed := fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg.APIKey); strings.Contains(printed, key) {
		t.Fatal("the API key was echoed")
	}
	for _, content := range []string{"", "a\nb"} {
		bad := filepath.Join(t.TempDir(), "bad")
		if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadAPIKeyFile(bad); err == nil || strings.Contains(err.Error(), content) && content != "" {
			t.Errorf("key file %q: %v", content, err)
		}
	}
}
