// Package deploy holds the deployment files (Dockerfile, compose.yaml, k8s/, kafka/) and, in this test, the
// checks that keep them true to the binary without a Docker engine: the binary builds static, kustomize
// renders every Kubernetes directory, the compose file parses with compose's own loader and names every stage,
// and every command line in them uses subcommands and flags the binary accepts and environment variables it
// reads. Every stage reads one job file (--config) that the manifests mount: `draftflow config` loads and checks
// it with the container's arguments, as the stage would. A flag or job key renamed in code fails this test.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	composetypes "github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"
)

// kustomize is the pinned kustomize CLI, built from its Go module (v5.6.0 builds with this Go) on first use.
const kustomize = "sigs.k8s.io/kustomize/kustomize/v5@v5.6.0"

// stages every deployment must run.
var stages = []string{"ingest", "tokenize", "generate", "sink"}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds cmd/draftflow as the Dockerfile does (CGO_ENABLED=0, trimmed) once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "draftflow-deploy-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "draftflow")
		cmd := exec.Command("go", "build", "-trimpath", "-o", binPath, "./cmd/draftflow")
		cmd.Dir = ".." // the main module, of which this test module is not part
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return binPath
}

func TestBinaryIsStatic(t *testing.T) {
	f, err := elf.Open(binary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary has a program interpreter: it is dynamically linked, and distroless/static cannot run it")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the binary needs shared libraries %v", libs)
	}
}

// flagRE matches a flag's line in Go's flag usage output ("  -name value").
var flagRE = regexp.MustCompile(`^\s+-([A-Za-z0-9][A-Za-z0-9._-]*)`)

var (
	flagsMu    sync.Mutex
	flagsCache = map[string]map[string]bool{}
)

// flagsOf returns the flags `draftflow SUB -h` documents (nil when SUB is no subcommand).
func flagsOf(t *testing.T, sub string) map[string]bool {
	t.Helper()
	flagsMu.Lock()
	defer flagsMu.Unlock()
	if f, ok := flagsCache[sub]; ok {
		return f
	}
	out, _ := exec.Command(binary(t), sub, "-h").CombinedOutput()
	if bytes.Contains(out, []byte("unknown command")) {
		flagsCache[sub] = nil
		return nil
	}
	set := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := flagRE.FindStringSubmatch(sc.Text()); m != nil {
			set[m[1]] = true
		}
	}
	if len(set) == 0 {
		t.Fatalf("`draftflow %s -h` lists no flags:\n%s", sub, out)
	}
	flagsCache[sub] = set
	return set
}

// envRead is every DRAFTFLOW_* name the binary's source mentions.
var envRead = sync.OnceValue(func() map[string]bool {
	names := map[string]bool{}
	re := regexp.MustCompile(`DRAFTFLOW_[A-Z0-9_]+`)
	_ = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == "out" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			b, _ := os.ReadFile(path)
			for _, m := range re.FindAll(b, -1) {
				names[string(m)] = true
			}
		}
		return nil
	})
	return names
})

// commandLine is one container's draftflow invocation.
type commandLine struct {
	where string            // file and container, for messages
	args  []string          // after the binary: subcommand, flags, values
	env   map[string]string // environment the container sets (values may be references)
	files map[string]string // files mounted into the container (path there -> a file here holding its content)
}

// jobStages are the subcommands that must read their settings from a job file in a deployment.
var jobStages = []string{"ingest", "tokenize", "generate", "sink", "capture", "sim"}

// configArg returns the --config value of args, if any.
func configArg(args []string) (path string, rest []string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "config" {
			if !hasVal && i+1 < len(args) {
				i++
				val = args[i]
			}
			path, ok = val, true
			continue
		}
		rest = append(rest, a)
	}
	return path, rest, ok
}

// checkJob runs `draftflow config --command SUB FILE ARGS` on the job file the container is given, with the
// container's other arguments, and returns its error: the checks the stage runs on its settings before it starts.
func checkJob(t *testing.T, sub, file string, args []string) error {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"config", "--command", sub, file}, args...)...)
	for _, kv := range os.Environ() { // the container's settings are the file's: none from this machine
		if !strings.HasPrefix(kv, "DRAFTFLOW_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// problems lists a subcommand the binary lacks, a flag its subcommand does not accept, and a DRAFTFLOW_*
// variable the container sets that neither the binary reads nor the command line references.
func (c commandLine) problems(t *testing.T) []string {
	t.Helper()
	if len(c.args) == 0 {
		return []string{c.where + ": no command"}
	}
	sub := c.args[0]
	if strings.HasPrefix(sub, "-") { // the top-level usage (the Dockerfile's CMD --help)
		if out, err := exec.Command(binary(t), c.args...).CombinedOutput(); err != nil {
			return []string{fmt.Sprintf("%s: draftflow %s: %v\n%s", c.where, strings.Join(c.args, " "), err, out)}
		}
		return nil
	}
	flags := flagsOf(t, sub)
	if flags == nil {
		return []string{fmt.Sprintf("%s: draftflow has no subcommand %q", c.where, sub)}
	}
	var bad []string
	for _, a := range c.args[1:] {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue // a value
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !flags[name] {
			bad = append(bad, fmt.Sprintf("%s: `draftflow %s` has no flag -%s (in %q)", c.where, sub, name, a))
		}
	}
	if path, rest, ok := configArg(c.args[1:]); ok {
		if file, mounted := c.files[path]; !mounted {
			bad = append(bad, fmt.Sprintf("%s: --config %s: no file is mounted there", c.where, path))
		} else if err := checkJob(t, sub, file, rest); err != nil {
			bad = append(bad, fmt.Sprintf("%s: draftflow %s --config %s: %v", c.where, sub, path, err))
		}
	} else if slices.Contains(jobStages, sub) {
		bad = append(bad, fmt.Sprintf("%s: draftflow %s reads no job file (--config): a deployment's settings are in one", c.where, sub))
	}
	line := strings.Join(c.args, " ")
	for name := range c.env {
		if strings.HasPrefix(name, "DRAFTFLOW_") && !envRead()[name] && !strings.Contains(line, name) {
			bad = append(bad, fmt.Sprintf("%s: sets %s, which draftflow never reads and its command line does not use", c.where, name))
		}
	}
	return bad
}

// check reports c's problems as test errors.
func (c commandLine) check(t *testing.T) {
	t.Helper()
	for _, p := range c.problems(t) {
		t.Error(p)
	}
}

func TestKubernetesRendersAndMatchesBinary(t *testing.T) {
	dirs, _ := filepath.Glob("k8s/overlays/*")
	dirs = append([]string{"k8s/base"}, dirs...)
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "go", "run", kustomize, "build", dir)
			cmd.Env = append(os.Environ(), "GOFLAGS=") // a module-mode run outside this module
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				if os.Getenv("DRAFTFLOW_REQUIRE_ASSETS") == "" && strings.Contains(stderr.String(), "proxy") {
					t.Skipf("kustomize could not be fetched (%v); DRAFTFLOW_REQUIRE_ASSETS=1 makes this a failure", err)
				}
				t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
			}
			lines := k8sCommandLines(t, dir, out)
			var subs []string
			for _, l := range lines {
				l.check(t)
				subs = append(subs, l.args[0])
			}
			for _, s := range stages {
				if !slices.Contains(subs, s) {
					t.Errorf("%s renders no container running `draftflow %s` (found %v)", dir, s, subs)
				}
			}
		})
	}
}

// k8sCommandLines returns the draftflow containers of kustomize's output, each with the files its ConfigMap
// volumes mount.
func k8sCommandLines(t *testing.T, dir string, rendered []byte) []commandLine {
	t.Helper()
	type container struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Env     []struct {
			Name string `yaml:"name"`
		} `yaml:"env"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			SubPath   string `yaml:"subPath"`
		} `yaml:"volumeMounts"`
	}
	type podSpec struct {
		Containers     []container `yaml:"containers"`
		InitContainers []container `yaml:"initContainers"`
		Volumes        []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name  string `yaml:"name"`
				Items []struct {
					Key  string `yaml:"key"`
					Path string `yaml:"path"`
				} `yaml:"items"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	}
	type document struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Data map[string]string `yaml:"data"`
		Spec struct {
			Template struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
			JobTemplate struct {
				Spec struct {
					Template struct {
						Spec podSpec `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			} `yaml:"jobTemplate"`
		} `yaml:"spec"`
	}
	var docs []document
	configMaps := map[string]map[string]string{}
	dec := yaml.NewDecoder(bytes.NewReader(rendered))
	for {
		var doc document
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("kustomize output of %s: %v", dir, err)
		}
		if doc.Kind == "ConfigMap" {
			configMaps[doc.Metadata.Name] = doc.Data
		}
		docs = append(docs, doc)
	}
	tmp := t.TempDir()
	var lines []commandLine
	for _, doc := range docs {
		pods := []podSpec{doc.Spec.Template.Spec, doc.Spec.JobTemplate.Spec.Template.Spec}
		for _, p := range pods {
			for _, c := range append(p.InitContainers, p.Containers...) {
				if !strings.Contains(c.Image, "draftflow") {
					continue
				}
				args := c.Args
				if len(c.Command) > 0 { // an explicit command replaces the image's entrypoint
					if filepath.Base(c.Command[0]) != "draftflow" {
						continue
					}
					args = append(slices.Clone(c.Command[1:]), c.Args...)
				}
				env := map[string]string{}
				for _, e := range c.Env {
					env[e.Name] = ""
				}
				where := dir + ": " + doc.Kind + "/" + doc.Metadata.Name + " container " + c.Name
				files := map[string]string{}
				for _, m := range c.VolumeMounts {
					for _, v := range p.Volumes {
						if v.Name != m.Name || v.ConfigMap == nil {
							continue
						}
						data, ok := configMaps[v.ConfigMap.Name]
						if !ok {
							t.Errorf("%s: volume %s names ConfigMap %s, which %s does not render", where, v.Name, v.ConfigMap.Name, dir)
							continue
						}
						paths := map[string]string{} // key -> path under the mount
						for k := range data {
							paths[k] = k
						}
						if len(v.ConfigMap.Items) > 0 {
							paths = map[string]string{}
							for _, it := range v.ConfigMap.Items {
								paths[it.Key] = it.Path
							}
						}
						for key, rel := range paths {
							at := filepath.Join(m.MountPath, rel)
							if m.SubPath != "" {
								if rel != m.SubPath {
									continue
								}
								at = m.MountPath
							}
							local := filepath.Join(tmp, fmt.Sprintf("%d-%s", len(lines), filepath.Base(rel)))
							if err := os.WriteFile(local, []byte(data[key]), 0o644); err != nil {
								t.Fatal(err)
							}
							files[at] = local
						}
					}
				}
				lines = append(lines, commandLine{where: where, args: args, env: env, files: files})
			}
		}
	}
	if len(lines) == 0 {
		t.Fatalf("kustomize output of %s has no draftflow container", dir)
	}
	return lines
}

func TestComposeParsesAndMatchesBinary(t *testing.T) {
	wd, _ := os.Getwd()
	project, err := loader.LoadWithContext(context.Background(), composetypes.ConfigDetails{
		WorkingDir:  wd,
		ConfigFiles: []composetypes.ConfigFile{{Filename: filepath.Join(wd, "compose.yaml")}},
		Environment: composetypes.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("draftflow", true) })
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var subs []string
	for name, svc := range project.Services {
		if !strings.Contains(svc.Image, "draftflow") {
			continue
		}
		env := map[string]string{}
		for k := range svc.Environment {
			env[k] = ""
		}
		files := map[string]string{}
		for _, c := range svc.Configs {
			cfg, ok := project.Configs[c.Source]
			if !ok || cfg.File == "" {
				t.Errorf("compose.yaml service %s: config %s is no file of the project", name, c.Source)
				continue
			}
			target := c.Target
			if target == "" {
				target = "/" + c.Source
			}
			files[target] = cfg.File
		}
		l := commandLine{where: "compose.yaml service " + name, args: svc.Command, env: env, files: files}
		l.check(t)
		if len(l.args) > 0 {
			subs = append(subs, l.args[0])
		}
	}
	for _, s := range stages {
		if !slices.Contains(subs, s) {
			t.Errorf("compose.yaml has no service running `draftflow %s` (found %v)", s, subs)
		}
	}
}

// TestJobExampleMatchesBinary: the example of a whole job loads for `run` and every stage, as the binary checks it.
func TestJobExampleMatchesBinary(t *testing.T) {
	for _, sub := range []string{"run", "ingest", "tokenize", "generate", "sink", "capture"} {
		if err := checkJob(t, sub, "job.example.yaml", nil); err != nil {
			t.Errorf("job.example.yaml for draftflow %s: %v", sub, err)
		}
	}
}

func TestDockerfileMatchesBinary(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var entry, cmd []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, kw := range []string{"ENTRYPOINT", "CMD"} {
			rest, ok := strings.CutPrefix(line, kw+" ")
			if !ok {
				continue
			}
			var v []string
			if err := yaml.Unmarshal([]byte(rest), &v); err != nil { // the exec form is a JSON array
				t.Fatalf("Dockerfile %s is not in exec form: %q", kw, rest)
			}
			if kw == "ENTRYPOINT" {
				entry = v
			} else {
				cmd = v
			}
		}
	}
	if len(entry) != 1 || filepath.Base(entry[0]) != "draftflow" {
		t.Fatalf("Dockerfile ENTRYPOINT %q: want the draftflow binary alone (compose and Kubernetes pass the subcommand)", entry)
	}
	commandLine{where: "Dockerfile CMD", args: cmd}.check(t)
}

// TestCheckCatchesDrift proves the checks above can fail: a renamed flag, an unknown subcommand, an
// environment variable nothing reads, a stage without a job file, a job file not mounted and a job file with a
// key no command has or a bad value are each reported.
func TestCheckCatchesDrift(t *testing.T) {
	job := func(text string) map[string]string {
		p := filepath.Join(t.TempDir(), "job.yaml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return map[string]string{"/etc/draftflow/job.yaml": p}
	}
	good := job("brokers: kafka:9092\ngenerate:\n  sglang: [http://sim:30000]\n")
	if p := (commandLine{where: "good", args: []string{"generate", "--config=/etc/draftflow/job.yaml"}, files: good}).problems(t); len(p) > 0 {
		t.Fatalf("a good job file: %v", p)
	}
	for _, l := range []commandLine{
		{where: "renamed flag", args: []string{"generate", "--sglang-url=http://x", "--config=/etc/draftflow/job.yaml"}, files: good},
		{where: "unknown subcommand", args: []string{"generator", "--sglang=http://x"}},
		{where: "unread variable", args: []string{"sink", "--config", "/etc/draftflow/job.yaml"}, files: good, env: map[string]string{"DRAFTFLOW_NOT_A_SETTING": ""}},
		{where: "no job file", args: []string{"sink", "--out=/data"}},
		{where: "job file not mounted", args: []string{"generate", "--config=/etc/draftflow/job.yaml"}},
		{where: "unknown key", args: []string{"generate", "--config=/etc/draftflow/job.yaml"}, files: job("generate:\n  concurency: 8\n")},
		{where: "bad value of another stage", args: []string{"generate", "--config=/etc/draftflow/job.yaml"}, files: job("sink:\n  zstd-level: high\n")},
		{where: "bad flag value over the file", args: []string{"generate", "--config=/etc/draftflow/job.yaml", "--concurrency=many"}, files: good},
	} {
		if len(l.problems(t)) == 0 {
			t.Errorf("%s: %q passed the check", l.where, l.args)
		}
	}
}
