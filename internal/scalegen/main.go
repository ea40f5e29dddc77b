// Command scalegen writes the inputs of `make scale` (scale.sh beside it): a JSONL file of small synthetic
// conversations without ids (so ingest gives each a content-hash id, spread over the whole key space) and
// the bundled sample model directory for the tokenize stage. It is not part of the draftflow binary.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
)

func main() {
	n := flag.Int("n", 200000, "conversations to write")
	out := flag.String("out", "scale.jsonl", "JSONL file to write")
	model := flag.String("model", "", "also write the bundled sample model into this directory")
	flag.Parse()
	if *model != "" {
		if err := bundled.WriteDir(*model); err != nil {
			log.Fatal(err)
		}
	}
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	topics := []string{"tides", "compilers", "bread", "orbits", "glaciers", "chess", "rivers", "bees"}
	for i := range *n {
		fmt.Fprintf(w, `{"messages": [{"role": "system", "content": "You are terse."}, `+
			`{"role": "user", "content": "Question %d: say one thing about %s."}]}`+"\n", i, topics[i%len(topics)])
	}
	if err := w.Flush(); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
}
