package ingest

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/topics"
)

func TestSettingsLayering(t *testing.T) {
	s, err := ParseSettings([]byte(`{
		"default": {"max_new_tokens": 4096, "temperature": 0.6, "template_kwargs": {"enable_thinking": true, "x": 1}},
		"datasets": {
			"glaive": {"lane": "short", "max_new_tokens": 10240, "seed": 7},
			"code":   {"lane": "long", "temperature": 0, "top_k": 20, "sampling_seed": 3, "template_kwargs": {"enable_thinking": false}}
		}}`))
	if err != nil {
		t.Fatal(err)
	}
	base := topics.Sampling{TopP: 0.95, MaxNewTokens: 100, Lane: "flag-lane"}

	g := s.For("glaive", base)
	if g.MaxNewTokens != 10240 || g.Lane != "short" || *g.Temperature != 0.6 || g.TopP != 0.95 || *g.Seed != 7 ||
		g.TemplateKwargs["enable_thinking"] != true {
		t.Errorf("glaive %+v", g)
	}
	c := s.For("code", base)
	if c.Temperature == nil || *c.Temperature != 0 || c.TopK != 20 || *c.Seed != 3 || c.Lane != "long" ||
		c.TemplateKwargs["enable_thinking"] != false || c.TemplateKwargs["x"] != float64(1) {
		t.Errorf("code %+v (temperature 0 must survive as greedy)", c)
	}
	o := s.For("other", base)
	if o.MaxNewTokens != 4096 || o.Lane != "flag-lane" || o.Seed != nil {
		t.Errorf("other %+v", o)
	}
	if base.TemplateKwargs != nil {
		t.Error("For modified its base")
	}
	if e := (Settings{}).For("x", base); e.MaxNewTokens != 100 || e.Lane != "flag-lane" {
		t.Errorf("empty settings changed the flags: %+v", e)
	}
}

func TestSettingsTurns(t *testing.T) {
	s, err := ParseSettings([]byte(`{"default": {"turns": "last"}, "datasets": {"a": {"turns": "all"}, "b": {"lane": "x"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for ds, want := range map[string]string{"a": TurnsAll, "b": TurnsLast, "c": TurnsLast} {
		if got := s.TurnsFor(ds, TurnsAll); got != want {
			t.Errorf("TurnsFor(%s) = %s, want %s", ds, got, want)
		}
	}
	if got := (Settings{}).TurnsFor("a", TurnsLast); got != TurnsLast {
		t.Errorf("no settings: TurnsFor = %s, want the flag's", got)
	}
}

func TestSettingsErrors(t *testing.T) {
	for in, want := range map[string]string{
		`{"default": {"max_new_token": 5}}`:                    "unknown field",
		`{"datasets": {"a": {"top_p": 1.5}}}`:                  "datasets.a: top_p 1.5 is outside [0, 1]",
		`{"default": {"temperature": -1}}`:                     "default: temperature -1 is negative",
		`{"datasets": {"a": {"seed": 1, "sampling_seed": 2}}}`: "disagree",
		`[1]`: "cannot unmarshal",
		`{"datasets": {"a": {"turns": "first"}}}`: `datasets.a: turns "first": want "all" or "last"`,
		`{"default": {"turns": "ALL"}}`:           `default: turns "ALL"`,
	} {
		_, err := ParseSettings([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	path := filepath.Join(t.TempDir(), "s.json")
	os.WriteFile(path, []byte(`{"default": {"lane": "x"}}`), 0o644)
	if s, err := LoadSettings(path); err != nil || s.Default.Lane != "x" {
		t.Errorf("LoadSettings: %+v %v", s, err)
	}
	if _, err := LoadSettings(path + ".missing"); err == nil {
		t.Error("missing settings file accepted")
	}
}

func TestRegisterFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{"--input", "a.jsonl", "--input=dir,with,commas", "--dataset", "d", "--settings", "s.json",
		"--max-new-tokens", "512", "--temperature", "0", "--top-p", "0.9", "--top-k", "40", "--seed", "-3", "--lane", "long",
		"--replies", "keep", "--turns", "last"})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Defaults
	if strings.Join(c.Inputs, "|") != "a.jsonl|dir,with,commas" || c.Dataset != "d" || c.SettingsFile != "s.json" ||
		d.MaxNewTokens != 512 || d.Temperature == nil || *d.Temperature != 0 || d.TopP != 0.9 || d.TopK != 40 ||
		d.Seed == nil || *d.Seed != -3 || d.Lane != "long" || c.Replies != RepliesKeep || c.Turns != TurnsLast {
		t.Fatalf("config %+v defaults %+v", c, d)
	}
	var unset Config
	fs = flag.NewFlagSet("ingest", flag.ContinueOnError)
	unset.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil || unset.Defaults.Temperature != nil || unset.Defaults.Seed != nil {
		t.Fatalf("unset temperature/seed must stay nil: %+v", unset.Defaults)
	}
	fs = flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	(&Config{}).RegisterFlags(fs)
	if err := fs.Parse([]string{"--temperature", "-1"}); err == nil {
		t.Error("negative temperature accepted")
	}
}
