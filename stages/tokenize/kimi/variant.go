package kimi

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Variant is one known version of a Kimi directory's custom tokenizer code.
type Variant struct {
	// Name identifies the variant in errors and logs.
	Name string
	// Tokenizer is the Fingerprint of tokenization_kimi.py.
	Tokenizer string
	// Tools is the Fingerprint of tool_declaration_ts.py, empty when the variant does not import it.
	Tools string
	// TypeScriptTools: apply_chat_template renders tools with tool_declaration_ts.py and passes
	// tools_ts_str, thinking=True and preserve_thinking=False (K2.5); otherwise it only sorts tool keys.
	TypeScriptTools bool
}

// variants are the versions this package implements (Variants returns a copy).
var variants = []Variant{
	{
		Name:      "kimi-k2 (Kimi-K2-Instruct/-Thinking tokenization_kimi.py: deep_sort_dict(tools) override)",
		Tokenizer: "691090ff94dd352a",
	},
	{
		Name:            "kimi-k2.5 (tokenization_kimi.py with tool_declaration_ts.py: tools_ts_str override)",
		Tokenizer:       "3649a375ee093e07",
		Tools:           "fbd6c5ce6ce250b5",
		TypeScriptTools: true,
	},
}

// TokenizerFile and ToolsFile are the Python files a Kimi directory ships.
const (
	TokenizerFile = "tokenization_kimi.py"
	ToolsFile     = "tool_declaration_ts.py"
)

// ErrUnrecognized is wrapped by Recognize's error for custom code that matches no known variant.
var ErrUnrecognized = errors.New("unrecognized custom tokenizer code")

// Recognize returns the variant of the custom tokenizer code in dir. Code that matches no variant is
// an error naming the file and listing the supported variants: a different tokenizer must never be
// applied silently.
func Recognize(dir string) (*Variant, error) {
	tokFP, err := FingerprintFile(filepath.Join(dir, TokenizerFile))
	if err != nil {
		return nil, err
	}
	toolsFP := ""
	if _, err := os.Stat(filepath.Join(dir, ToolsFile)); err == nil {
		if toolsFP, err = FingerprintFile(filepath.Join(dir, ToolsFile)); err != nil {
			return nil, err
		}
	}
	for i := range variants {
		v := &variants[i]
		if v.Tokenizer != tokFP {
			continue
		}
		if v.Tools != "" && v.Tools != toolsFP {
			file := filepath.Join(dir, ToolsFile)
			if toolsFP == "" {
				return nil, fmt.Errorf("kimi: %s imports %s, which the directory lacks", filepath.Join(dir, TokenizerFile), ToolsFile)
			}
			return nil, fmt.Errorf("kimi: %s (fingerprint %s): %w; %s expects %s %s; supported variants:\n%s",
				file, toolsFP, ErrUnrecognized, v.Name, ToolsFile, v.Tools, supported())
		}
		found := *v
		return &found, nil
	}
	return nil, fmt.Errorf("kimi: %s (fingerprint %s): %w; draftflow implements these variants, recognised by content:\n%s",
		filepath.Join(dir, TokenizerFile), tokFP, ErrUnrecognized, supported())
}

// Variants returns the versions this package implements.
func Variants() []Variant { return slices.Clone(variants) }

func supported() string {
	var b strings.Builder
	for _, v := range variants {
		fmt.Fprintf(&b, "  - %s: %s %s", v.Name, TokenizerFile, v.Tokenizer)
		if v.Tools != "" {
			fmt.Fprintf(&b, ", %s %s", ToolsFile, v.Tools)
		}
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

// FingerprintFile is Fingerprint of a file's content.
func FingerprintFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("kimi: %w", err)
	}
	return Fingerprint(string(data)), nil
}

// Fingerprint identifies Python source by what it does: the sha256 (16 hex digits) of its lines with
// trailing whitespace removed, leaving out blank lines, comment lines and docstrings (a triple-quoted
// string that starts a line). Comments after code are kept: telling them from a '#' inside a string
// needs a Python lexer, and known files have none.
func Fingerprint(src string) string {
	h := sha256.New()
	sc := bufio.NewScanner(strings.NewReader(src))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	inDoc := ""
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		trimmed := strings.TrimLeft(line, " \t")
		if inDoc != "" {
			if strings.Contains(trimmed, inDoc) {
				inDoc = ""
			}
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if q := docQuote(trimmed); q != "" {
			if rest := trimmed[3:]; !strings.Contains(rest, q) {
				inDoc = q
			}
			continue
		}
		h.Write([]byte(line))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// docQuote returns the triple quote a line opens a docstring with, or "".
func docQuote(trimmed string) string {
	for _, q := range []string{`"""`, `'''`} {
		if strings.HasPrefix(trimmed, q) {
			return q
		}
	}
	return ""
}
