package bench

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDebugKV(t *testing.T) {
	var out strings.Builder
	start := time.Now()
	_, err := Bench(context.Background(), BenchOptions{
		Scenarios: strings.Split(os.Getenv("SC"), ","), Policies: []string{PolicyKVBudget, PolicyFixed150, PolicyFixed64RR},
		TimeScale: 200, Parallel: 3, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}, &out)
	t.Log("\n", out.String(), err, time.Since(start))
}
