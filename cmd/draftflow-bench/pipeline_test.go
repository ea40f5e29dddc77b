package main

import (
	"context"
	"testing"
)

func TestPipelineFlags(t *testing.T) {
	if err := cmdPipeline(context.Background(), []string{"--no-such-flag"}); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
	if err := cmdPipeline(context.Background(), []string{"extra"}); err == nil {
		t.Fatal("a stray argument was accepted")
	}
	t.Setenv("DRAFTFLOW_KAFKA_TLS", "maybe")
	if err := cmdPipeline(context.Background(), nil); err == nil {
		t.Fatal("a malformed DRAFTFLOW_KAFKA_TLS was accepted")
	}
}
