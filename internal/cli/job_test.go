package cli

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// job is a command of the tests: shared settings, a stage's (repeatable --url among them) and its own.
type job struct {
	brokers string
	verbose bool
	urls    []string
	limit   int
	wait    time.Duration
	timeout time.Duration
}

func (j *job) table(command string) *Table {
	t := New(command)
	t.Add("", func(fs *flag.FlagSet) {
		fs.StringVar(&j.brokers, "brokers", "", "brokers (env T_BROKERS)")
		fs.BoolVar(&j.verbose, "verbose", false, "say more")
	})
	t.Add("stage", func(fs *flag.FlagSet) {
		fs.Func("url", "server URL (repeatable)", func(s string) error { j.urls = append(j.urls, s); return nil })
		fs.IntVar(&j.limit, "limit", 4, "requests in flight")
		fs.DurationVar(&j.wait, "wait", time.Second, "how long to wait")
	}, Rename("limit", "stage-limit"))
	t.Add(command, func(fs *flag.FlagSet) { fs.DurationVar(&j.timeout, "timeout", 0, "give up after this long") })
	return t
}

// other is a second command of the schema, with keys job has not.
func other() *Table {
	var addr string
	var rate float64
	t := New("other")
	t.Add("", func(fs *flag.FlagSet) { fs.StringVar(new(string), "brokers", "", "brokers") })
	t.Add("sim", func(fs *flag.FlagSet) {
		fs.StringVar(&addr, "addr", "127.0.0.1:1", "listen address")
		fs.Float64Var(&rate, "rate", 0, "a rate")
		fs.String("api-key", "", "require this key")
	})
	return t
}

func schema(t *testing.T) *Schema {
	t.Helper()
	s, err := NewSchema(new(job).table("run"), other())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writeJob(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const jobText = `# a job
brokers: file:9092
verbose: true
stage:
  url: [http://a:1, http://b:2]
  limit: 8
  wait: 5s
run:
  timeout: 1h
sim:
  addr: 0.0.0.0:30000
  api-key: hunter2
`

// Each layer overrides the one before: default < file < environment < flag; a repeatable setting takes only the
// list of the last layer that gives one; every value says where it came from; keys of another command are kept.
func TestLoadLayers(t *testing.T) {
	path := writeJob(t, jobText)
	env := map[string]string{"T_BROKERS": "env:9092"}
	var j job
	src := Sources{Schema: schema(t), Env: map[string]string{"brokers": "T_BROKERS"}, Getenv: func(k string) string { return env[k] }}
	fs, eff, err := j.table("run").Load([]string{"--config", path, "--url", "http://c:3", "--wait", "7s", "rest"}, src)
	if err != nil {
		t.Fatal(err)
	}
	want := job{brokers: "env:9092", verbose: true, urls: []string{"http://c:3"}, limit: 8, wait: 7 * time.Second, timeout: time.Hour}
	if !reflect.DeepEqual(j, want) {
		t.Errorf("settings %+v, want %+v", j, want)
	}
	if got := fs.Args(); len(got) != 1 || got[0] != "rest" {
		t.Errorf("args %v", got)
	}
	for key, w := range map[string]struct {
		src    Source
		origin string
	}{
		"brokers":       {FromEnv, "$T_BROKERS"},
		"verbose":       {FromFile, path + ":3"},
		"stage.url":     {FromFlag, "--url"},
		"stage.limit":   {FromFile, path + ":6"},
		"stage.wait":    {FromFlag, "--wait"},
		"run.timeout":   {FromFile, path + ":9"},
		"sim.addr":      {FromFile, path + ":11"},
		"stage.unknown": {},
	} {
		v := eff.Lookup(key)
		if key == "stage.unknown" {
			if v != nil {
				t.Errorf("%s: %+v", key, v)
			}
			continue
		}
		if v == nil || v.Source != w.src || v.Origin != w.origin {
			t.Errorf("%s: %+v, want %v from %s", key, v, w.src, w.origin)
		}
	}
	if v := eff.Lookup("sim.addr"); v.Flag != "" || len(eff.Unused) != 2 {
		t.Errorf("another command's key: %+v, unused %+v", v, eff.Unused)
	}
	if v := eff.Lookup("stage.limit"); v.Flag != "stage-limit" {
		t.Errorf("a renamed flag keeps its group's key: %+v", v)
	}

	// Without the variable and the flags the file decides; without the file, the defaults.
	var k job
	src.Getenv = func(string) string { return "" }
	if _, _, err := k.table("run").Load([]string{"--config", path}, src); err != nil {
		t.Fatal(err)
	}
	if k.brokers != "file:9092" || !reflect.DeepEqual(k.urls, []string{"http://a:1", "http://b:2"}) {
		t.Errorf("from the file: %+v", k)
	}
	var d job
	_, eff, err = d.table("run").Load(nil, src)
	if err != nil {
		t.Fatal(err)
	}
	if d.limit != 4 || d.wait != time.Second || eff.Lookup("stage.limit").Source != FromDefault {
		t.Errorf("defaults: %+v", d)
	}
}

// A bad job file stops Load before any setting is set, naming the file, the line, the key and, for an unknown
// key, the nearest valid one.
func TestLoadFileErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"brokerz: x\n", "job.yaml:1: unknown key brokerz (did you mean brokers?)"},
		{"stage:\n  limt: 3\n", "job.yaml:2: unknown key stage.limt (did you mean stage.limit?)"},
		{"limit: 3\n", "job.yaml:1: unknown key limit (did you mean stage.limit?)"},
		{"stag:\n  limit: 3\n", "unknown key stag (did you mean stage?)"},
		{"kafka-sasl-password: hunter2\n", "a job file holds no secret"},
		{"zzzzzzzzzzzzzzzz: 1\n", "job.yaml:1: unknown key zzzzzzzzzzzzzzzz"},
		{"verbose: true\nstage:\n  limit: many\n", "job.yaml:3: stage.limit: invalid value \"many\""},
		{"stage:\n  limit: many\n", "(want an integer)"},
		{"verbose: maybe\n", "job.yaml:1: verbose: invalid value \"maybe\""},
		{"stage:\n  wait: [1s, 2s]\n", "job.yaml:2: stage.wait takes one value, not a list"},
		{"brokers: {a: 1}\n", "job.yaml:1: brokers takes one value, not a mapping"},
		{"stage: 3\n", "job.yaml:1: stage: a group of settings"},
		{"brokers: a\nbrokers: b\n", "job.yaml:2: brokers is given twice (first on line 1)"},
		{"brokers:\n", "job.yaml:1: brokers has no value"},
		{"- a\n- b\n", "a job file is a mapping"},
		{"a: 1\n---\nb: 2\n", "one YAML document"},
		{"brokers: [\n", "job.yaml"},
		// Another command's key is checked too.
		{"sim:\n  rate: fast\n", "job.yaml:2: sim.rate: invalid value \"fast\""},
		// A credential in a URL is not echoed.
		{"stage:\n  limit: http://u:hunter2@h\n", "u:xxxxx@h"},
	} {
		var j job
		_, _, err := j.table("run").Load([]string{"--config", writeJob(t, c.text)}, Sources{Schema: schema(t)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error containing %q", c.text, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the credential: %v", c.text, err)
		}
		var defaults job
		defaults.table("run")
		if !reflect.DeepEqual(j, defaults) {
			t.Errorf("%q: settings were set before the file was found bad: %+v", c.text, j)
		}
	}
	// An empty file and a file of comments set nothing.
	for _, text := range []string{"", "# nothing\n", "stage:\n"} {
		var j job
		if _, _, err := j.table("run").Load([]string{"--config", writeJob(t, text)}, Sources{Schema: schema(t)}); err != nil || j.limit != 4 {
			t.Errorf("%q: %v %+v", text, err, j)
		}
	}
}

// A bad variable or flag names itself.
func TestLoadEnvAndFlagErrors(t *testing.T) {
	var j job
	src := Sources{Schema: schema(t), Env: map[string]string{"verbose": "T_VERBOSE"}, Getenv: func(string) string { return "perhaps" }}
	if _, _, err := j.table("run").Load(nil, src); err == nil || !strings.Contains(err.Error(), `T_VERBOSE="perhaps" (verbose)`) {
		t.Errorf("bad variable: %v", err)
	}
	if _, _, err := j.table("run").Load([]string{"--wait", "soon"}, Sources{}); err == nil || !strings.Contains(err.Error(), `invalid value "soon" for flag -wait`) {
		t.Errorf("bad flag: %v", err)
	}
	if _, _, err := j.table("run").Load([]string{"--config", "x.yaml"}, Sources{}); err == nil {
		t.Error("--config of a command without a schema: no error")
	}
	if _, _, err := j.table("run").Load([]string{"--config", filepath.Join(t.TempDir(), "none.yaml")}, Sources{Schema: schema(t)}); err == nil {
		t.Error("a missing job file: no error")
	}
}

// Render writes a job file that gives the command the same settings, with no credential in it.
func TestRenderRoundTrip(t *testing.T) {
	path := writeJob(t, jobText)
	src := Sources{Schema: schema(t), Env: map[string]string{"brokers": "T_BROKERS"},
		Getenv: func(string) string { return "https://alice:hunter2@env:9092" }}
	var a job
	_, eff, err := a.table("run").Load([]string{"--config", path, "--url", "x: y", "--url", "", "--verbose=false"}, src)
	if err != nil {
		t.Fatal(err)
	}
	eff.Notes = []string{"a note"}
	out := eff.Render()
	if strings.Contains(string(out), "hunter2") {
		t.Fatalf("rendered the credential:\n%s", out)
	}
	for _, want := range []string{"# draftflow run: effective configuration", `  - 'x: y'`, `  - ""`, "limit: 8", "(--stage-limit)",
		"not used by draftflow run", "# a note", "--verbose", "$T_BROKERS", "# api-key: [redacted]"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rendered configuration lacks %q:\n%s", want, out)
		}
	}
	var b job
	_, again, err := b.table("run").Load([]string{"--config", writeJob(t, string(out))}, Sources{Schema: schema(t)})
	if err != nil {
		t.Fatalf("the rendered configuration does not load: %v\n%s", err, out)
	}
	a.brokers = "https://alice:xxxxx@env:9092" // redacted
	if !reflect.DeepEqual(a, b) {
		t.Errorf("loaded from the rendered file: %+v, want %+v\n%s", b, a, out)
	}
	if len(again.Unused) != 1 || again.Unused[0].Key != "sim.addr" { // the credential is not written out
		t.Errorf("another command's key is not kept: %+v", again.Unused)
	}
}

// A key means one thing in every command: a list in one and a value in another is an error of the schema.
func TestSchemaKindsAgree(t *testing.T) {
	a := New("a")
	a.Add("g", func(fs *flag.FlagSet) { fs.Func("x", "x (repeatable)", func(string) error { return nil }) })
	b := New("b")
	b.Add("g", func(fs *flag.FlagSet) { fs.Int("x", 0, "x") })
	if _, err := NewSchema(a, b); err == nil || !strings.Contains(err.Error(), "job key g.x is list in draftflow a but int in draftflow b") {
		t.Errorf("NewSchema: %v", err)
	}
}

// The reference lists every key by group with its flags in each command.
func TestSchemaMarkdown(t *testing.T) {
	md := schema(t).Markdown(map[string]string{"brokers": "T_BROKERS"})
	for _, want := range []string{"#### Shared keys (top level)", "| `brokers` | `--brokers`: every command | string |  | `T_BROKERS` |",
		"#### `stage:`", "| `limit` | `--stage-limit`: run | int | `4` |", "| `addr` | `--addr`: other |", "| `url` | `--url`: run | list |", "#### `sim:`"} {
		if !strings.Contains(md, want) {
			t.Errorf("reference lacks %q:\n%s", want, md)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:1":                     "http://h:1",
		"http://u:p@h:1,http://v@h:2":    "http://u:xxxxx@h:1,http://v@h:2",
		"user@example.com":               "user@example.com",
		"sasl://alice:hunter2@b:9092/x?": "sasl://alice:xxxxx@b:9092/x?",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
