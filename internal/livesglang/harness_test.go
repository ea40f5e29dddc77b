package livesglang

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/draftflow/draftflow/internal/testassets"
	"github.com/draftflow/draftflow/internal/testutil"
	"github.com/draftflow/draftflow/shard"
)

// envLive turns the tier on; make test-sglang sets it.
const envLive = "DRAFTFLOW_LIVE_SGLANG"

var (
	repoRoot string // the repository root
	binPath  string // draftflow built for this run
	stateDir string // DRAFTFLOW_SGLANG_DIR of this run's servers: their pid files and logs
	buildErr error

	assetsOnce sync.Once
	assetsErr  string // why the venv or the model is unavailable
	venvPython string
	modelDir   string

	mainOnce sync.Once
	mainSrv  *server
	mainErr  error

	upMu sync.Mutex
	up   = map[string]*server{} // servers running now, by name
)

func TestMain(m *testing.M) {
	if os.Getenv(envLive) == "" {
		os.Exit(m.Run()) // every test skips
	}
	wd, _ := os.Getwd()
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	tmp, err := os.MkdirTemp("", "draftflow-live-sglang-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stateDir = tmp
	binPath = filepath.Join(tmp, "draftflow")
	build := exec.Command("go", "build", "-o", binPath, "./cmd/draftflow")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		buildErr = fmt.Errorf("go build: %v\n%s", err, out)
	}
	code := m.Run()
	upMu.Lock()
	var left []*server
	for _, s := range up {
		left = append(left, s)
	}
	upMu.Unlock()
	for _, s := range left {
		s.down() // takes upMu itself
	}
	if code == 0 {
		os.RemoveAll(tmp)
	} else {
		fmt.Fprintf(os.Stderr, "live SGLang tier failed: server logs and run directories kept under %s\n", tmp)
	}
	os.Exit(code)
}

// need skips t unless the tier is on, and fails or skips it (DRAFTFLOW_REQUIRE_ASSETS) when the venv or the
// model cannot be had.
func need(t *testing.T) {
	t.Helper()
	if os.Getenv(envLive) == "" {
		t.Skipf("live SGLang tier: run make test-sglang (%s=1)", envLive)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	assetsOnce.Do(func() {
		out, err := script("venv")
		if err != nil {
			assetsErr = err.Error()
			return
		}
		venv := strings.TrimSpace(out)
		if _, err := os.Stat(filepath.Join(venv, ".draftflow-complete")); err != nil {
			assetsErr = "no complete SGLang venv at " + venv + " (bash deploy/sglang/sglang.sh install)"
			return
		}
		venvPython = filepath.Join(venv, "bin", "python")
		out, err = script("model")
		if err != nil {
			assetsErr = "making the model: " + err.Error()
			return
		}
		modelDir = lastLine(out)
	})
	if assetsErr != "" {
		testassets.Unavailable(t, "%s", assetsErr)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// script runs deploy/sglang/sglang.sh with args and returns its stdout.
func script(args ...string) (string, error) { return scriptEnv(nil, args...) }

// scriptEnv is script with more environment variables.
func scriptEnv(env []string, args ...string) (string, error) {
	cmd := exec.Command("bash", append([]string{filepath.Join(repoRoot, "deploy", "sglang", "sglang.sh")}, args...)...)
	cmd.Env = append(append(os.Environ(), "DRAFTFLOW_SGLANG_DIR="+stateDir), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("sglang.sh %s: %v\n%s", strings.Join(args, " "), err, tail(stderr.String(), 30))
	}
	return stdout.String(), nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// server is one real SGLang server started by sglang.sh.
type server struct {
	name string
	url  string
	port int
	pool int
	args []string
	env  []string
}

// startServer starts a server named name with a KV pool of pool tokens and more sglang arguments, and stops
// it when t ends (a failed test prints the tail of its log and keeps it). At most two servers run at once.
func startServer(t *testing.T, name string, pool int, args ...string) *server {
	t.Helper()
	return startServerEnv(t, name, pool, nil, args...)
}

// startServerEnv is startServer with environment variables for the server.
func startServerEnv(t *testing.T, name string, pool int, env []string, args ...string) *server {
	t.Helper()
	s, err := launch(name, pool, 0, args, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.report(t)
		}
		s.down()
	})
	return s
}

func launch(name string, pool, port int, args, env []string) (*server, error) {
	upMu.Lock()
	n := len(up)
	_, again := up[name]
	upMu.Unlock()
	if n >= 2 && !again {
		return nil, fmt.Errorf("starting %s would make three servers at once (the tier's bound is two)", name)
	}
	cmd := []string{"up", "--name", name, "--pool", strconv.Itoa(pool)}
	if port > 0 {
		cmd = append(cmd, "--port", strconv.Itoa(port))
	}
	cmd = append(cmd, "--")
	cmd = append(cmd, args...)
	out, err := scriptEnv(env, cmd...)
	if err != nil {
		return nil, err
	}
	s := &server{name: name, url: lastLine(out), pool: pool, args: args, env: env}
	portText, err := os.ReadFile(filepath.Join(stateDir, name, "port"))
	if err != nil {
		return nil, err
	}
	s.port, _ = strconv.Atoi(strings.TrimSpace(string(portText)))
	upMu.Lock()
	up[name] = s
	upMu.Unlock()
	return s, nil
}

// logPath is the server's log file (all its starts).
func (s *server) logPath() string { return filepath.Join(stateDir, s.name, "log") }

// report prints where the server's log is and its last lines.
func (s *server) report(t *testing.T) {
	data, _ := os.ReadFile(s.logPath())
	t.Logf("server %s (%s) log: %s\n--- last lines ---\n%s", s.name, s.url, s.logPath(), tail(string(data), 40))
}

func (s *server) down() {
	_, _ = script("down", "--name", s.name)
	upMu.Lock()
	delete(up, s.name)
	upMu.Unlock()
}

// kill SIGKILLs the server's process group: a crash.
func (s *server) kill(t *testing.T) {
	t.Helper()
	if _, err := script("kill", "--name", s.name); err != nil {
		t.Fatal(err)
	}
}

// restart starts the server again on the same port with the same arguments.
func (s *server) restart(t *testing.T) {
	t.Helper()
	n, err := launch(s.name, s.pool, s.port, s.args, s.env)
	if err != nil {
		t.Fatal(err)
	}
	s.url = n.url
}

// mainServer is the tier's shared server: fp32, an 8,192-token pool, metrics on, at most 24 waiting requests
// (--max-queued-requests), the model's 2,048-token context given on the command line (so /server_info
// reports it, as the simulator configured with it does); stopped when the tier ends.
func mainServer(t *testing.T) *server {
	t.Helper()
	mainOnce.Do(func() {
		mainSrv, mainErr = launch("main", 8192, 0, []string{"--max-queued-requests", "24", "--context-length", "2048"}, nil)
	})
	if mainErr != nil {
		t.Fatal(mainErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			mainSrv.report(t)
		}
	})
	return mainSrv
}

// releaseMain stops the tier's shared server, for a test that needs both of the tier's server slots (a later
// mainServer starts it again). Tests run one at a time (-p 1, none parallel), so nothing else uses it meanwhile.
func releaseMain() {
	if mainSrv != nil {
		mainSrv.down()
	}
	mainOnce, mainSrv, mainErr = sync.Once{}, nil, nil
}

// getJSON fetches url and decodes its JSON answer into v; it returns the HTTP status.
func getJSON(t *testing.T, method, url string, body any, v any, header ...string) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("%s %s: HTTP %d, not JSON: %v: %.300s", method, url, resp.StatusCode, err, data)
		}
	}
	return resp.StatusCode
}

// scrape reads a Prometheus text endpoint into metric families.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// sample returns the value of the series of family name whose labels include want (label, value pairs), and
// whether there is one.
func sample(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// sum adds up every series of family name.
func sum(fams map[string]*dto.MetricFamily, name string) float64 {
	total := 0.0
	for _, m := range fams[name].GetMetric() {
		switch {
		case m.GetGauge() != nil:
			total += m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			total += m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// proc is one draftflow process of a test: its output is kept (and printed when the test fails), its
// /metrics scraped every half second while it runs.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error

	mu      sync.Mutex
	out     bytes.Buffer
	metrics string // the address its /metrics serves on, once logged
	last    map[string]*dto.MetricFamily
	scrapes int
}

var metricsAddr = regexp.MustCompile(`serving /metrics, /healthz and /readyz.* addr=(\S+)`)

// startDraftflow starts bin/draftflow with args (a --metrics-addr on port 0 is added) and env additions.
func startDraftflow(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	args = append(args, "--metrics-addr", "127.0.0.1:0")
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(binPath, args...)
	p.cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.out.WriteString(line)
			p.out.WriteByte('\n')
			if p.metrics == "" {
				if m := metricsAddr.FindStringSubmatch(line); m != nil {
					p.metrics = strings.Trim(m[1], `"`)
				}
			}
			p.mu.Unlock()
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		p.err = p.cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			p.mu.Lock()
			addr := p.metrics
			p.mu.Unlock()
			if addr == "" {
				continue
			}
			if fams, err := scrape("http://" + addr + "/metrics"); err == nil {
				p.mu.Lock()
				p.last, p.scrapes = fams, p.scrapes+1
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s output (last lines) ---\n%s", p.name, tail(p.output(), 60))
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// lastMetrics is the process's last /metrics scrape.
func (p *proc) lastMetrics() map[string]*dto.MetricFamily {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// wait waits for the process to exit (at most d) and returns its error.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		t.Fatalf("%s still running after %v", p.name, d)
		return nil
	}
}

// shardRow is one row of the shards, every column, as the sink defines it (read back here with a Parquet
// reader of the test's own, not the sink's).
type shardRow = shard.Row

// readRows reads every row of every shard under the output directory, failing on an (id, turn) written twice.
func readRows(t *testing.T, out string) map[string]map[int]shardRow {
	t.Helper()
	rows := map[string]map[int]shardRow{}
	paths, _ := filepath.Glob(filepath.Join(out, "*", "*.parquet"))
	for _, p := range paths {
		testutil.ReadParquet(t, p, func(rec arrow.Record, col func(string) arrow.Array) {
			str := func(name string, i int) string { return col(name).(*array.String).Value(i) }
			i32 := func(name string, i int) int32 { return col(name).(*array.Int32).Value(i) }
			inp, mask := col("input_ids").(*array.List), col("loss_mask").(*array.List)
			inVals := inp.ListValues().(*array.Int32).Int32Values()
			maskVals := mask.ListValues().(*array.Uint8).Uint8Values()
			for i := 0; i < int(rec.NumRows()); i++ {
				a, b := inp.ValueOffsets(i)
				ma, mb := mask.ValueOffsets(i)
				r := shardRow{ID: str("id", i), InputIDs: slices.Clone(inVals[a:b]), LossMask: slices.Clone(maskVals[ma:mb]),
					PromptLen: i32("prompt_len", i), CompletionLen: i32("completion_len", i), FinishReason: str("finish_reason", i),
					Dataset: str("dataset", i), Turn: i32("turn", i), Endpoint: str("endpoint", i), StopReason: str("stop_reason", i),
					Reply: str("reply", i)}
				if rows[r.ID] == nil {
					rows[r.ID] = map[int]shardRow{}
				}
				if _, dup := rows[r.ID][int(r.Turn)]; dup {
					t.Errorf("%s turn %d: written twice", r.ID, r.Turn)
				}
				rows[r.ID][int(r.Turn)] = r
			}
		})
	}
	return rows
}

// writeJSONL writes one JSON value per line.
func writeJSONL(t *testing.T, path string, lines []any) {
	t.Helper()
	var b bytes.Buffer
	for _, l := range lines {
		data, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// chat is a source conversation.
func chat(id string, msgs ...string) map[string]any {
	var m []map[string]string
	for i, c := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		m = append(m, map[string]string{"role": role, "content": c})
	}
	return map[string]any{"id": id, "messages": m}
}

// python runs a Python script with a JSON request on stdin and decodes its JSON answer.
func python(t *testing.T, interp, script string, req, resp any) {
	t.Helper()
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(interp, script)
	cmd.Stdin = bytes.NewReader(data)
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES=", "TRANSFORMERS_VERBOSITY=error")
	if interp == venvPython {
		cmd.Env = append(cmd.Env, "PYTHONPATH=") // the venv's own packages only
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", interp, script, err, tail(stderr.String(), 30))
	}
	if err := json.Unmarshal(stdout.Bytes(), resp); err != nil {
		t.Fatalf("%s: answer not JSON: %v\n%.500s", script, err, stdout.String())
	}
}

// countRows counts the conversations in the output directory's committed shards so far (0 before the first).
func countRows(out string) int {
	ids := map[string]bool{}
	if err := shard.ScanRows(context.Background(), out, func(r *shard.Row) error {
		ids[r.ID] = true
		return nil
	}); err != nil {
		return 0
	}
	return len(ids)
}
