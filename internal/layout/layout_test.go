package layout

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/draftflow/draftflow"

// pkg is what `go list -json` says of one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Standard   bool
}

// list returns every package of the module (tests excluded) with its imports and dependencies.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages of %s; want the whole module", len(pkgs), module)
	}
	return pkgs
}

// stage returns the stage a package belongs to ("stages/generate" for stages/generate/admission, "sink" for
// sink/journal), or "".
func stage(path string) string {
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	parts := strings.Split(rel, "/")
	switch {
	case parts[0] == "stages" && len(parts) > 1:
		return "stages/" + parts[1]
	case parts[0] == "sink":
		return "sink"
	}
	return ""
}

func internalOf(path string) bool { return strings.HasPrefix(path, module+"/") }

// TestStagesNeverImportEachOther: a stage (stages/*, the sink) shares only topics and the libraries below it
// with the others; no package of one stage imports a package of another.
func TestStagesNeverImportEachOther(t *testing.T) {
	stages := 0
	for _, p := range list(t) {
		from := stage(p.ImportPath)
		if from == "" {
			continue
		}
		stages++
		for _, imp := range p.Imports {
			if to := stage(imp); to != "" && to != from {
				t.Errorf("%s (stage %s) imports %s (stage %s)", p.ImportPath, from, imp, to)
			}
		}
	}
	if stages < 5 {
		t.Fatalf("found %d packages of stages; the rule checked nothing", stages)
	}
}

// TestLowerPackagesImportNoStage: the contract (topics), the transport (kafka), the shard format (shard), the
// offline tools and the SGLang client never depend on a stage, the orchestrator or the command line. The one
// exception is the sink's journal (sink/journal), a file format of the output directory that the offline
// inspection reads; it depends on no stage either.
func TestLowerPackagesImportNoStage(t *testing.T) {
	lower := []string{"topics", "kafka", "shard", "offline", "sglang", "metrics", "secret", "sink/journal"}
	checked := 0
	for _, p := range list(t) {
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		if !slices.ContainsFunc(lower, func(l string) bool { return rel == l || strings.HasPrefix(rel, l+"/") }) {
			continue
		}
		checked++
		for _, d := range p.Deps {
			drel := strings.TrimPrefix(d, module+"/")
			if (stage(d) != "" && drel != "sink/journal") || drel == "pipeline" || strings.HasPrefix(drel, "cmd/") || strings.HasPrefix(drel, "bench/") {
				t.Errorf("%s depends on %s", p.ImportPath, d)
			}
		}
	}
	if checked < len(lower) {
		t.Fatalf("checked %d packages; want at least %d", checked, len(lower))
	}
}

// TestTopicsIsStandardLibraryOnly: the contract between stages imports only the standard library.
func TestTopicsIsStandardLibraryOnly(t *testing.T) {
	for _, p := range list(t) {
		if p.ImportPath != module+"/topics" {
			continue
		}
		for _, d := range p.Deps {
			if strings.Contains(strings.Split(d, "/")[0], ".") {
				t.Errorf("topics depends on %s", d)
			}
		}
		return
	}
	t.Fatal("no package topics")
}

// TestKafkaMovesBytes: package kafka (not kafka/stream, which holds the record lifecycle) knows no record type
// of topics and none of the domain's packages: it depends only on the module's plumbing.
func TestKafkaMovesBytes(t *testing.T) {
	plumbing := []string{"secret", "metrics", "internal/background"}
	for _, p := range list(t) {
		if p.ImportPath != module+"/kafka" {
			continue
		}
		for _, d := range p.Deps {
			if internalOf(d) && !slices.Contains(plumbing, strings.TrimPrefix(d, module+"/")) {
				t.Errorf("kafka depends on %s", d)
			}
		}
		return
	}
	t.Fatal("no package kafka")
}

// TestStagesCarryNoBenchmark: no stage, not the orchestrator and not the shipped binary (cmd/draftflow) imports a
// benchmark package (bench/...): the benchmarks drive the stages' packages, never the other way round, and
// draftflow-bench runs them.
func TestStagesCarryNoBenchmark(t *testing.T) {
	checked, binary := 0, false
	for _, p := range list(t) {
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		if stage(p.ImportPath) == "" && rel != "pipeline" && rel != "cmd/draftflow" {
			continue
		}
		binary = binary || rel == "cmd/draftflow"
		checked++
		for _, d := range p.Deps {
			if drel := strings.TrimPrefix(d, module+"/"); internalOf(d) && strings.HasPrefix(drel, "bench/") {
				t.Errorf("%s depends on %s", rel, drel)
			}
		}
	}
	if checked < 5 || !binary {
		t.Fatalf("checked %d packages (cmd/draftflow among them: %v); want every stage, the orchestrator and the binary", checked, binary)
	}
}
