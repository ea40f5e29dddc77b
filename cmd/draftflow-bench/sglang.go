package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/draftflow/draftflow/bench/sglang"
)

// cmdSGLang runs the benchmark against live SGLang servers on this machine (make bench-sglang).
func cmdSGLang(ctx context.Context, args []string) error {
	fs := newFlagSet("sglang")
	var o sglang.Options
	pools := fs.String("pools", "2048,4096", "KV pool sizes (--max-total-tokens), one server each")
	fixed := fs.String("fixed", "8,16,32,64", "--policy fixed --concurrency values run in every repeat")
	sweep := fs.String("sweep", "4,12,24,48", "concurrencies run once per pool before the repeats; the best joins the repeats "+
		"when it is not among --fixed, and bench_serving runs at it (empty: no sweep; bench_serving at --prompts)")
	fs.IntVar(&o.Prompts, "prompts", 48, "dataset size")
	fs.IntVar(&o.NewTokens, "new-tokens", 128, "max_new_tokens of every request (ignore_eos false)")
	fs.IntVar(&o.Repeats, "repeats", 3, "interleaved repeats per policy (the order rotates each repeat)")
	fs.BoolVar(&o.BenchServing, "bench-serving", true, "also run SGLang's own bench_serving as an outside baseline")
	fs.StringVar(&o.Script, "script", "deploy/sglang/sglang.sh", "the server script")
	fs.StringVar(&o.Model, "model", "", "model directory (default: sglang.sh model)")
	fs.StringVar(&o.WorkDir, "work-dir", "", "datasets, run outputs and server logs (default: a new temporary directory)")
	serverArgs := fs.String("server-args", "", "more arguments for every server, space-separated")
	fs.StringVar(&o.URL, "url", "", "benchmark this running server (started with --enable-metrics) instead of starting one per pool")
	loopActions := fs.String("loop-actions", "", "--loop-action values (mark, keep, drop) the default policy also runs with, each a policy of its own "+
		"in every repeat: mark against the default (off) is what watching replies costs, keep against mark what stopping loops saves")
	jsonOut := fs.String("json", "", "also write the result (rows and every run) as JSON to this file")
	fs.StringVar(&o.Draftflow, "draftflow", "", "the draftflow binary whose run command is measured (default: draftflow beside this command)")
	fs.DurationVar(&o.PollInterval, "poll", 0, "/v1/loads sampling interval (default 250ms)")
	fs.DurationVar(&o.RunTimeout, "run-timeout", 0, "one run's limit (default 20m)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.Pools, err = ints(*pools); err != nil {
		return fmt.Errorf("--pools: %w", err)
	}
	if o.Fixed, err = ints(*fixed); err != nil {
		return fmt.Errorf("--fixed: %w", err)
	}
	if o.Sweep, err = ints(*sweep); err != nil {
		return fmt.Errorf("--sweep: %w", err)
	}
	o.ServerArgs = strings.Fields(*serverArgs)
	for _, a := range strings.Split(*loopActions, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.LoopActions = append(o.LoopActions, a)
		}
	}
	if o.Draftflow == "" {
		o.Draftflow, err = besideThis("draftflow")
	} else {
		o.Draftflow, err = filepath.Abs(o.Draftflow)
	}
	if err != nil {
		return err
	}
	if o.WorkDir == "" {
		if o.WorkDir, err = os.MkdirTemp("", "draftflow-bench-sglang-"); err != nil {
			return err
		}
	}
	if o.WorkDir, err = filepath.Abs(o.WorkDir); err != nil {
		return err
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	res, err := sglang.Bench(ctx, o, os.Stdout)
	if *jsonOut != "" && res != nil {
		data, jerr := json.MarshalIndent(res, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(*jsonOut, append(data, '\n'), 0o644)
		}
		if err == nil {
			err = jerr
		}
	}
	return err
}

// ints parses a comma-separated list of positive integers; empty is none.
func ints(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// besideThis is the path of the program name in this command's directory (make build puts draftflow and
// draftflow-bench side by side in bin/).
func besideThis(name string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	path := filepath.Join(filepath.Dir(exe), name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no %s beside %s (make build puts both in bin/; --draftflow names another): %w", name, exe, err)
	}
	return path, nil
}
