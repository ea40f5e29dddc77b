package main

import (
	"context"
	"testing"
)

func TestBenchPipelineFlags(t *testing.T) {
	if err := cmdBench(context.Background(), []string{"pipeline", "--no-such-flag"}); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
	if err := cmdBench(context.Background(), []string{"pipeline", "extra"}); err == nil {
		t.Fatal("a stray argument was accepted")
	}
}
