package kafkatest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Test files that reach a real broker of their own, outside kafkatest, and why: each is a tier with its own make
// target that starts the broker (deploy/kafka/kafka.sh) and hands the test its address or state dir.
var ownBrokerTiers = map[string]string{
	"cmd/draftflow/chaos_test.go":     "make chaos: a kafka.sh broker the test restarts (DRAFTFLOW_CHAOS_KAFKA_DIR)",
	"cmd/draftflow/rebalance_test.go": "make rebalance: a kafka.sh broker (DRAFTFLOW_REBALANCE_BROKERS)",
}

// Environment variables naming brokers that test files outside kafkatest may read, and why.
var brokerEnvHandoffs = map[string]string{
	"HELPER_BROKERS":              "a test's helper process, handed the cluster its parent test got from kafkatest",
	"DRAFTFLOW_REBALANCE_BROKERS": ownBrokerTiers["cmd/draftflow/rebalance_test.go"],
}

// brokerStarters are the packages that start a broker: a test may name their types (embedded.User, for
// SecureEmbedded) but calls none of their functions; it gets a broker from Brokers, Cluster, Config, Embedded or
// SecureEmbedded instead.
var brokerStarters = map[string]bool{
	"github.com/draftflow/draftflow/kafka/embedded": true,
	"github.com/twmb/franz-go/pkg/kfake":            true,
}

// kafkaScript is the path of the script that starts a real broker.
var kafkaScript = regexp.MustCompile(`(^|/)kafka\.sh$`)

// A fixed address on this machine: a broker someone started by hand, which no tier runs. Port 1 (where nothing
// listens) is how tests name an unreachable broker, and is allowed.
var localAddr = regexp.MustCompile(`^(localhost|127\.0\.0\.1|\[::1\]):([0-9]+)$`)

// TestBrokersComeFromKafkatest: every broker address a test file of the module dials comes from kafkatest, so
// every test that talks to Kafka is in a package whose tests import kafkatest, and `make test-integration`, which
// runs every test of those packages against a real broker, cannot miss one. A test file outside kafkatest may
// not start a broker itself (call into kafka/embedded or kfake), read DRAFTFLOW_TEST_BROKERS or
// DRAFTFLOW_TEST_SASL_* (Real, Brokers and RealSASL do), read another *BROKERS variable or run kafka.sh (except
// the tiers above), or name a fixed local broker address.
//
// Not covered, by design: `draftflow run` without --brokers starts the embedded broker that is part of the
// product; the cmd/draftflow tests of that mode test the product, and its --brokers mode is tested against the
// test's cluster.
func TestBrokersComeFromKafkatest(t *testing.T) {
	root := moduleRoot(t)
	var problems []string
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			name := d.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" ||
				rel == "kafka/kafkatest" || rel == "kafka/embedded" {
				return fs.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return fs.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		files++
		problems = append(problems, checkTestFile(t, path, rel)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("found %d test files under %s; the walk is looking in the wrong place", files, root)
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// checkTestFile returns what in one test file reaches a broker other than through kafkatest.
func checkTestFile(t *testing.T, path, rel string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	report := func(n ast.Node, format string, args ...any) {
		pos := fset.Position(n.Pos())
		problems = append(problems, rel+":"+strconv.Itoa(pos.Line)+": "+fmt.Sprintf(format, args...))
	}
	osName, brokerPkgs := "", map[string]string{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		if brokerStarters[p] {
			brokerPkgs[name] = p
		}
		if p == "os" {
			osName = name
		}
	}
	_, ownTier := ownBrokerTiers[rel]
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			if strings.Contains(s, "DRAFTFLOW_TEST_BROKERS") || strings.Contains(s, "DRAFTFLOW_TEST_SASL_") {
				report(n, "names %q: use kafkatest.Real, Brokers or RealSASL", s)
			}
			if kafkaScript.MatchString(s) && !ownTier {
				report(n, "runs kafka.sh: a test gets its broker from kafkatest (or is a tier of its own, listed in ownBrokerTiers)")
			}
			if m := localAddr.FindStringSubmatch(s); m != nil && m[2] != "1" && m[2] != "0" {
				report(n, "names the fixed address %s: a test gets its broker from kafkatest", s)
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			if p, ok := brokerPkgs[x.Name]; ok {
				report(n, "calls %s.%s: get the broker from kafkatest (Brokers, Cluster, Config, Embedded)", p, sel.Sel.Name)
				return true
			}
			if x.Name != osName || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") || len(n.Args) != 1 {
				return true
			}
			lit, ok := n.Args[0].(*ast.BasicLit)
			if !ok {
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			if strings.HasSuffix(name, "BROKERS") && brokerEnvHandoffs[name] == "" && !strings.HasPrefix(name, "DRAFTFLOW_TEST_") {
				report(n, "reads %s: a test gets its broker from kafkatest (or is listed in brokerEnvHandoffs)", name)
			}
		}
		return true
	})
	return problems
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// The check finds each way around kafkatest, and lets the allowed ones through.
func TestBrokersComeFromKafkatestCatches(t *testing.T) {
	src := `package x_test

import (
	"os"
	"testing"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
)

func TestX(t *testing.T) {
	_, _ = embedded.Start(embedded.Config{})
	_ = os.Getenv("DRAFTFLOW_TEST_BROKERS")
	_ = os.Getenv("MY_BROKERS")
	_ = kafka.Config{Brokers: []string{"localhost:9092"}}
	_ = []string{"bash", "deploy/kafka/kafka.sh", "up"}

	_ = os.Getenv("HELPER_BROKERS")
	_ = kafka.Config{Brokers: []string{"127.0.0.1:1"}}
}
`
	path := filepath.Join(t.TempDir(), "x_test.go")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	got := checkTestFile(t, path, "x/x_test.go")
	for i, want := range []string{"x/x_test.go:12: calls github.com/draftflow/draftflow/kafka/embedded.Start", "x/x_test.go:13: names \"DRAFTFLOW_TEST_BROKERS\"",
		"x/x_test.go:14: reads MY_BROKERS", "x/x_test.go:15: names the fixed address localhost:9092", "x/x_test.go:16: runs kafka.sh"} {
		if i >= len(got) || !strings.HasPrefix(got[i], want) {
			t.Errorf("problem %d: got %q, want it to start %q", i, got, want)
		}
	}
	if len(got) != 5 {
		t.Errorf("%d problems, want 5: %q", len(got), got)
	}
	if got := checkTestFile(t, path, "cmd/draftflow/chaos_test.go"); len(got) != 4 {
		t.Errorf("as a tier of its own, %d problems, want 4 (kafka.sh allowed): %q", len(got), got)
	}
}
