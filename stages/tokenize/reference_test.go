package tokenize

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/draftflow/draftflow/internal/testassets"
)

// transformersPin is the transformers version requirements-test.txt pins.
func transformersPin(t testing.TB) string {
	t.Helper()
	reqs, err := os.ReadFile("../../requirements-test.txt")
	if err != nil {
		t.Fatal(err)
	}
	pin := regexp.MustCompile(`(?m)^transformers==(\S+)`).FindSubmatch(reqs)
	if pin == nil {
		t.Fatal("requirements-test.txt pins no transformers")
	}
	return string(pin[1])
}

// pythonReference is the answer of a Python reference script for a request, cached under
// $CACHE/golden/<sub>/ by the script's text, the request (key) and the named files of modelDir (all of its
// files when names is empty). On a miss it checks that python can import `imports` at the pinned
// transformers version, then runs the script with request(), which may differ from key in where the model
// is (a copy, say), as JSON on stdin.
func pythonReference(t testing.TB, sub, script, imports, modelDir string, names []string, key any, request func() any) []byte {
	t.Helper()
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(src)
	kb, _ := json.Marshal(key)
	h.Write(kb)
	if len(names) == 0 {
		entries, _ := os.ReadDir(modelDir)
		for _, e := range entries {
			names = append(names, e.Name())
		}
	}
	for _, f := range names {
		if data, err := os.ReadFile(filepath.Join(modelDir, f)); err == nil {
			fmt.Fprintf(h, "%s:%d:", f, len(data))
			h.Write(data)
		}
	}
	path := filepath.Join(testassets.CacheDir(), "golden", sub, hex.EncodeToString(h.Sum(nil))[:32]+".json")
	if out, err := os.ReadFile(path); err == nil {
		return out
	}
	py := testassets.Python()
	want := transformersPin(t)
	probe := exec.Command(py, "-c", "import "+imports+", sys; sys.stdout.write(transformers.__version__)")
	if v, err := probe.Output(); err != nil || string(v) != want {
		testassets.Unavailable(t, "python %s with transformers %s (pip install -r requirements-test.txt): got %q, %v", imports, want, v, err)
	}
	in, _ := json.Marshal(request())
	cmd := exec.Command(py, script)
	cmd.Env = append(os.Environ(), "TRANSFORMERS_VERBOSITY=error", "HF_HUB_OFFLINE=1", "TRANSFORMERS_NO_ADVISORY_WARNINGS=1")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(script), err, stderr.String())
	}
	if os.MkdirAll(filepath.Dir(path), 0o755) == nil {
		tmp := fmt.Sprintf("%s.tmp%d", path, os.Getpid())
		if os.WriteFile(tmp, out, 0o644) == nil {
			_ = os.Rename(tmp, path)
		}
	}
	return out
}
