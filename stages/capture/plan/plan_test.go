package plan

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReadModel(t *testing.T) {
	for name, tc := range map[string]struct {
		body string
		want Model
	}{
		"top level":   {`{"num_hidden_layers": 36, "hidden_size": 4096}`, Model{Layers: 36, Hidden: 4096}},
		"text_config": {`{"text_config": {"num_hidden_layers": 61, "hidden_size": 7168}}`, Model{Layers: 61, Hidden: 7168}},
		"top wins":    {`{"num_hidden_layers": 2, "text_config": {"num_hidden_layers": 61, "hidden_size": 7168}}`, Model{Layers: 2, Hidden: 7168}},
		"neither":     {`{"vocab_size": 10}`, Model{}},
	} {
		got, err := ReadModel(writeConfig(t, tc.body))
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", name, got, err, tc.want)
		}
	}
	if m, err := ReadModel(""); err != nil || m != (Model{}) {
		t.Errorf("no directory: %+v, %v", m, err)
	}
	if m, err := ReadModel(t.TempDir()); err != nil || m != (Model{}) {
		t.Errorf("no config.json: %+v, %v", m, err)
	}
	if _, err := ReadModel(writeConfig(t, `{"num_hidden_layers": "many"`)); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("a malformed config.json: %v, want an error naming it", err)
	}
}

func TestAuxLayers(t *testing.T) {
	if got, err := AuxLayers([]int{1, 2}, 40); err != nil || !reflect.DeepEqual(got, []int{1, 2}) {
		t.Errorf("named layers: %v, %v", got, err)
	}
	if got, err := AuxLayers(nil, 36); err != nil || !reflect.DeepEqual(got, []int{2, 18, 33}) {
		t.Errorf("36 layers: %v, %v", got, err)
	}
	if _, err := AuxLayers(nil, 0); err == nil || !strings.Contains(err.Error(), "--aux-layers") {
		t.Errorf("no layer count: %v", err)
	}
	if _, err := AuxLayers(nil, MinLayers-1); err == nil || !strings.Contains(err.Error(), "at least") {
		t.Errorf("too few layers: %v", err)
	}
}

func TestEstimate(t *testing.T) {
	var b strings.Builder
	if err := (Estimate{AuxLayers: 3, Hidden: 1000, Tokens: 1000, TokensWhat: "tokens", Dir: t.TempDir()}).Write(&b); err != nil {
		t.Fatal(err)
	}
	// (3 aux + final) x 1000 x 2 bytes = 8 KB a token; 1000 tokens: 8 MB raw, 5.6 MB at the assumed 0.70.
	for _, want := range []string{"8.0 KB a token raw", "not yet measured", "1000 tokens -> about 8.0 MB raw, 5.6 MB stored"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("estimate %q lacks %q", b.String(), want)
		}
	}
	b.Reset()
	if err := (Estimate{AuxLayers: 3, Dir: t.TempDir()}).Write(&b); err != nil || !strings.Contains(b.String(), "not known before the first answer") {
		t.Errorf("unknown hidden size: %q, %v", b.String(), err)
	}
	if n, err := PendingTokens(filepath.Join(t.TempDir(), "not-yet")); n != 0 || err != nil {
		t.Errorf("PendingTokens of a directory not made yet: %d, %v", n, err)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[float64]string{0: "0 B", 999: "999 B", 1500: "1.5 KB", 7.3e9: "7.3 GB"} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%g) = %q, want %q", n, got, want)
		}
	}
}
