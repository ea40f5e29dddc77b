package offline

import (
	"testing"

	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/topics"
)

// interleaved returns n generations alternating between two runs (temperature 0.5 and 1.0), ids from base: all
// of them, then each run's.
func interleaved(base, n int) (all, a, b []*topics.Generation) {
	for i := base; i < base+n; i++ {
		temp := 0.5
		if i%2 == 1 {
			temp = 1.0
		}
		g := shardtest.Generation(i, temp)
		all = append(all, g)
		if temp == 0.5 {
			a = append(a, g)
		} else {
			b = append(b, g)
		}
	}
	return all, a, b
}

// twoRunDir writes two runs (temperatures 0.5 and 1.0) of the same model, 30 rows each, under a new output
// directory.
func twoRunDir(t *testing.T) (string, []*topics.Generation, []*topics.Generation) {
	t.Helper()
	dir := t.TempDir()
	gens, a, b := interleaved(0, 60)
	shardtest.Flush(t, dir, 0, gens)
	return dir, a, b
}
