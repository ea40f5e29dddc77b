package main

import (
	"bytes"
	"context"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/pipeline"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/stages/generate"
)

var update = flag.Bool("update", false, "rewrite docs/config.md's list of job keys from the binary")

// jobExample is the repository's example of a whole job.
const jobExample = repoRoot + "/deploy/job.example.yaml"

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// unsetEnv clears the variables a command reads, for the test's duration.
func unsetEnv(t *testing.T) {
	t.Helper()
	for _, name := range append(slices.Collect(maps.Values(envVars)), cli.EnvKafkaSASLPassword, envSGLangAPIKey) {
		t.Setenv(name, "")
	}
}

// A stage's settings come from its defaults, the job file, the DRAFTFLOW_* variables and its flags, each over the
// one before; a list the command line gives replaces the file's.
func TestJobFilePrecedence(t *testing.T) {
	unsetEnv(t)
	job := writeFile(t, "job.yaml", `brokers: file:9092
namespace: from-file
retention: 7d
kafka-sasl-username: alice
generate:
  sglang: [http://a:30000, http://b:30000]
  concurrency: 16
  request-timeout: 45m
  lane: [short]
tokenize:
  model: /models/x
`)
	t.Setenv(envNamespace, "from-env")
	t.Setenv(envBrokers, "env:9092")
	var c common
	var cfg generate.Config
	_, eff, err := load(generateFlags(&c, &cfg), []string{"--config", job, "--brokers", "flag:9092", "--sglang", "http://c:30000"})
	if err != nil {
		t.Fatal(err)
	}
	if c.brokers != "flag:9092" || c.namespace != "from-env" || c.retention != 7*24*time.Hour || c.security.SASL.Username != "alice" {
		t.Errorf("shared settings: %+v", c)
	}
	if !reflect.DeepEqual(cfg.Endpoints, []string{"http://c:30000"}) || cfg.Concurrency != 16 || cfg.RequestTimeout != 45*time.Minute ||
		len(cfg.Lanes) != 1 || cfg.Lanes[0].Name != "short" || cfg.MaxInFlight != generate.DefaultMaxInFlight {
		t.Errorf("generate: endpoints %v concurrency %d timeout %v lanes %+v in flight %d", cfg.Endpoints, cfg.Concurrency, cfg.RequestTimeout, cfg.Lanes, cfg.MaxInFlight)
	}
	for key, want := range map[string]cli.Source{"brokers": cli.FromFlag, "namespace": cli.FromEnv, "retention": cli.FromFile,
		"generate.sglang": cli.FromFlag, "generate.concurrency": cli.FromFile, "generate.max-in-flight": cli.FromDefault} {
		if v := eff.Lookup(key); v == nil || v.Source != want {
			t.Errorf("%s: %+v, want from %v", key, v, want)
		}
	}
	if v := eff.Lookup("tokenize.model"); v == nil || v.Flag != "" {
		t.Errorf("another stage's key: %+v", v)
	}
}

// A bad job file stops `draftflow run` before anything starts (no output directory), naming the line, the key
// and the nearest valid one; a stage checks the other stages' keys too.
func TestJobFileErrorsStopBeforeStart(t *testing.T) {
	unsetEnv(t)
	out := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		command string
		text    string
		want    string
	}{
		{"run", "ingest:\n  input: [" + sampleFile + "]\nsink:\n  out: " + out + "\ngenerate:\n  concurency: 8\n", "job.yaml:6: unknown key generate.concurency (did you mean generate.concurrency?)"},
		{"run", "ingest:\n  input: [" + sampleFile + "]\nconcurrency: 8\n", "job.yaml:3: unknown key concurrency (did you mean generate.concurrency or capture.concurrency?)"},
		{"run", "ingest:\n  input: [" + sampleFile + "]\ngenerate:\n  request-timeout: 45\n", "job.yaml:4: generate.request-timeout: invalid value \"45\""},
		{"run", "ingest:\n  input: " + sampleFile + "\ngenerate:\n  policy: [fixed]\n", "job.yaml:4: generate.policy takes one value, not a list"},
		{"generate", "generate:\n  sglang: [http://a:1]\nsink:\n  zstd-level: high\n", "job.yaml:4: sink.zstd-level: invalid value \"high\""},
		{"sink", "kafka-sasl-password: hunter2\n", "a job file holds no secret"},
	} {
		var run func(context.Context, []string) error
		for _, cmd := range commands() {
			if cmd.Name == c.command {
				run = cmd.Run
			}
		}
		err := run(context.Background(), []string{"--config", writeFile(t, "job.yaml", c.text)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("draftflow %s with %q: %v, want an error containing %q", c.command, c.text, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows the credential: %v", err)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a run with a bad job file made its output directory")
	}
}

// The example job loads for every command that reads job files, and describes a whole job.
func TestJobExample(t *testing.T) {
	unsetEnv(t)
	for _, c := range jobCommands {
		var b bytes.Buffer
		if err := printConfig(&b, []string{"--command", c.name, jobExample}); err != nil {
			t.Errorf("draftflow config --command %s %s: %v", c.name, jobExample, err)
		}
	}
	f, err := cli.ReadFile(jobExample, mustSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	// Inputs, model, servers and lanes, sampling, policy, Kafka and its security, output, capture, retention.
	for _, key := range []string{"ingest.input", "tokenize.model", "generate.sglang", "generate.lane", "ingest.temperature",
		"generate.policy", "brokers", "kafka-sasl-mechanism", "kafka-sasl-password-file", "sink.out", "capture.sglang-aux", "retention"} {
		if _, ok := f.Get(key); !ok {
			t.Errorf("%s sets no %s", jobExample, key)
		}
	}
}

func mustSchema(t *testing.T) *cli.Schema {
	t.Helper()
	s, err := jobSchema()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every key of a job file is documented, and every documented key is one: docs/config.md's list is what
// `draftflow config --keys` prints. A key named in the documentation (`generate.lane`) is a key.
func TestJobKeysDocumented(t *testing.T) {
	var b bytes.Buffer
	if err := printConfig(&b, []string{"--keys"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(repoRoot, "docs", "config.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- BEGIN job keys -->\n", "<!-- END job keys -->"
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q block", path, begin, end)
	}
	want := "\n" + b.String()
	if got := string(doc[i+len(begin) : j]); got != want {
		if *update {
			doc = slices.Concat(doc[:i+len(begin)], []byte(want), doc[j:])
			if err := os.WriteFile(path, doc, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s's list of job keys is not the binary's: run go test ./cmd/draftflow -run TestJobKeysDocumented -update", path)
	}
	schema := mustSchema(t)
	groups := strings.Join(schema.Groups(), "|")
	span := regexp.MustCompile(`^(` + groups + `)\.([a-z0-9-]+)$`)
	for _, m := range allMentions(readDocs(t)) {
		if sm := span.FindStringSubmatch(m.text); sm != nil && !m.code && schema.Lookup(m.text) == nil && !strings.HasPrefix(m.file, "docs/changelog") {
			if _, isGo := goPackages(t)[sm[1]]; isGo && strings.ToUpper(sm[2][:1]) == sm[2][:1] {
				continue
			}
			t.Errorf("%s: names job key %s, which no command has", m, m.text)
		}
	}
	// Every setting of every command that reads job files has its key in the list.
	for _, c := range jobCommands {
		for _, s := range c.table().Settings() {
			if !strings.Contains(b.String(), "`--"+s.Name+"`") {
				t.Errorf("draftflow %s --%s (key %s) is not in the list", c.name, s.Name, s.Key)
			}
		}
	}
}

// The configuration a run records reloads, alone, into the same settings: the file's, the variables' and the
// flags' values, with no credential in it.
func TestRecordedConfigRepeats(t *testing.T) {
	unsetEnv(t)
	job := writeFile(t, "job.yaml", `namespace: from-file
ingest:
  input: [a.jsonl, b.jsonl]
  temperature: 0.6
generate:
  lane: ["short,max_new_tokens=100"]
  sglang: ["http://user:pa55@h:30000"]
sink:
  out: /data/shards
capture:
  model: /models/x
`)
	t.Setenv(envRetention, "3d")
	t.Setenv(cli.EnvKafkaSASLPassword, "hunter2-secret")
	t.Setenv(envSGLangAPIKey, "key-secret")
	args := []string{"--config", job, "--generate-max-new-tokens", "77", "--sim-time-scale", "20", "--timeout", "2h"}
	var c1 common
	var cfg1 pipeline.Config
	var merge1 string
	c1.effective = mustLoad(t, runFlags(&c1, &cfg1, &merge1), args)
	rec := c1.record()
	for _, secret := range []string{"hunter2-secret", "key-secret", "pa55"} {
		if bytes.Contains(rec, []byte(secret)) {
			t.Fatalf("the record holds a credential:\n%s", rec)
		}
	}
	for _, want := range []string{"$DRAFTFLOW_KAFKA_SASL_PASSWORD", "$DRAFTFLOW_SGLANG_API_KEY", "retention: 3d", "--generate-max-new-tokens",
		"not used by draftflow run", "built as draftflow"} {
		if !bytes.Contains(rec, []byte(want)) {
			t.Errorf("the record lacks %q:\n%s", want, rec)
		}
	}

	unsetEnv(t)
	var c2 common
	var cfg2 pipeline.Config
	var merge2 string
	eff2 := mustLoad(t, runFlags(&c2, &cfg2, &merge2), []string{"--config", writeFile(t, "config.yaml", string(rec))})
	// The credentials and the URL's password are not recorded: the same settings otherwise.
	cfg1.Generate.APIKey = cfg2.Generate.APIKey
	cfg1.Generate.Endpoints = []string{"http://user:xxxxx@h:30000"}
	if !reflect.DeepEqual(cfg1, cfg2) {
		t.Errorf("settings from the record differ:\n%+v\n%+v\n%s", cfg1, cfg2, rec)
	}
	c1.effective, c2.effective = nil, nil
	if !reflect.DeepEqual(c1, c2) {
		t.Errorf("shared settings from the record differ:\n%+v\n%+v", c1, c2)
	}
	if merge1 != merge2 || eff2.Lookup("capture.model") == nil {
		t.Errorf("run's own settings or another command's key lost: %q %q %+v", merge1, merge2, eff2.Unused)
	}
}

func mustLoad(t *testing.T, tb *cli.Table, args []string) *cli.Effective {
	t.Helper()
	_, eff, err := load(tb, args)
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

// settingsOf is a rendered configuration without its comments: the settings alone.
func settingsOf(rendered []byte) string {
	var out []string
	for _, line := range strings.Split(string(rendered), "\n") {
		if i := strings.Index(line, "  # "); i >= 0 {
			line = strings.TrimRight(line[:i], " ")
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") || line == "" {
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// `draftflow run --config` records its configuration beside the shards of each run it writes; running from the
// recorded file gives a run of the same settings.
func TestRunRecordsConfig(t *testing.T) {
	unsetEnv(t)
	out := filepath.Join(t.TempDir(), "out")
	job := writeFile(t, "job.yaml", "ingest:\n  input: ["+sampleFile+"]\nsink:\n  out: "+out+"\nrun:\n  timeout: 2m\n")
	if err := cmdRun(context.Background(), []string{"--config", job}); err != nil {
		t.Fatal(err)
	}
	dirs, err := shard.RunDirs(out)
	if err != nil || len(dirs) == 0 {
		t.Fatalf("runs under %s: %v %v", out, dirs, err)
	}
	var recorded []string
	for _, d := range dirs {
		files, err := shard.ConfigFiles(d)
		if err != nil || len(files) != 1 {
			t.Fatalf("%s: recorded configurations %v (%v), want one", d, files, err)
		}
		recorded = append(recorded, files[0])
	}
	b, err := os.ReadFile(recorded[0])
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(recorded[0]) != shard.ConfigFile(b) || !bytes.Contains(b, []byte("out: "+out)) {
		t.Errorf("%s:\n%s", recorded[0], b)
	}
	// Again from the record, into an empty directory: the same settings.
	again := writeFile(t, "recorded.yaml", string(b))
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if err := cmdRun(context.Background(), []string{"--config", again}); err != nil {
		t.Fatal(err)
	}
	dirs, err = shard.RunDirs(out)
	if err != nil || len(dirs) == 0 {
		t.Fatalf("runs under %s: %v %v", out, dirs, err)
	}
	files, _ := shard.ConfigFiles(dirs[0])
	if len(files) != 1 {
		t.Fatalf("%s after the run from the record: %v, want one record", dirs[0], files)
	}
	b2, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if settingsOf(b) != settingsOf(b2) || !bytes.Contains(b2, []byte("(job file "+again+")")) {
		t.Errorf("the run from the record had other settings:\n%s\n---\n%s", b, b2)
	}
}

// `draftflow config` prints each value with where it came from and no credential; a bad command or no job file is
// an error.
func TestConfigCommand(t *testing.T) {
	unsetEnv(t)
	t.Setenv(cli.EnvKafkaSASLPassword, "hunter2-secret")
	t.Setenv(envNamespace, "ns-env")
	job := writeFile(t, "job.yaml", "brokers: b:9092\nkafka-sasl-mechanism: PLAIN\ngenerate:\n  sglang: [http://a:1]\n")
	var b bytes.Buffer
	if err := printConfig(&b, []string{"--command", "generate", job, "--concurrency", "8"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"# draftflow generate: effective configuration", "brokers: b:9092", job + ":1",
		"namespace: ns-env", "$DRAFTFLOW_NAMESPACE", "concurrency: 8", "--concurrency", "# policy: kv-budget",
		"the Kafka SASL password: $DRAFTFLOW_KAFKA_SASL_PASSWORD"} {
		if !strings.Contains(out, want) {
			t.Errorf("draftflow config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("draftflow config shows the password:\n%s", out)
	}
	for _, args := range [][]string{{"--command", "inspect", job}, {}, {job, "stray"}, {filepath.Join(t.TempDir(), "none.yaml")}} {
		if err := printConfig(&bytes.Buffer{}, args); err == nil {
			t.Errorf("draftflow config %q: no error", args)
		}
	}
}

// A key means the same in every command (cli.NewSchema checks the kinds agree), and a setting's key does not
// depend on the name a command gives its flag.
func TestJobKeysAcrossCommands(t *testing.T) {
	s := mustSchema(t)
	for key, flags := range map[string][]string{
		"generate.lane":  {"run:generate-lane", "generate:lane"},
		"ingest.lane":    {"run:lane", "ingest:lane"},
		"sink.out":       {"run:out", "sink:out", "capture:out"},
		"tokenize.group": {"tokenize:group", "status:tokenize-group"},
		"brokers":        {"run:brokers", "status:brokers", "replay:brokers", "sim:brokers"},
	} {
		k := s.Lookup(key)
		if k == nil {
			t.Errorf("no key %s", key)
			continue
		}
		var got []string
		for _, u := range k.Uses {
			got = append(got, u.Command+":"+u.Setting.Name)
		}
		for _, f := range flags {
			if !slices.Contains(got, f) {
				t.Errorf("%s: flags %v, want %s among them", key, got, f)
			}
		}
	}
}
