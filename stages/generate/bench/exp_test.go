package bench

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestExp(t *testing.T) {
	if os.Getenv("EXP") == "" {
		t.Skip()
	}
	opts := BenchOptions{Policies: strings.Split(os.Getenv("EXP"), ","), SimDuration: 60 * time.Minute}
	if s := os.Getenv("SC"); s != "" {
		opts.Scenarios = strings.Split(s, ",")
	}
	if s := os.Getenv("TU"); s != "" {
		opts.Budget.TargetUsage, _ = strconv.ParseFloat(s, 64)
	}
	if s := os.Getenv("Q"); s != "" {
		opts.Budget.Quantile, _ = strconv.ParseFloat(s, 64)
	}
	if s := os.Getenv("QLO"); s != "" {
		opts.Budget.MinServerQueue, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("QHI"); s != "" {
		opts.Budget.MaxServerQueue, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("DUR"); s != "" {
		opts.SimDuration, _ = time.ParseDuration(s)
	}
	if os.Getenv("DBG") != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-4 * len(os.Getenv("DBG")))}))
	}
	var out strings.Builder
	if _, err := Bench(context.Background(), opts, &out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
}
