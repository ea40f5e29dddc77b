package cli

import (
	"context"
	"fmt"
	"io"
)

// Command is one subcommand of a program (draftflow's run, draftflow-bench's generate).
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, args []string) error
}

// WriteUsage writes a program's usage line and its commands with their summaries, aligned; noun is what the program
// calls a command ("command", "benchmark").
func WriteUsage(w io.Writer, program, noun string, cmds []Command) {
	fmt.Fprintf(w, "usage: %s <%s> [flags]\n\n%ss:\n", program, noun, noun)
	width := 0
	for _, c := range cmds {
		width = max(width, len(c.Name))
	}
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.Name, c.Summary)
	}
	fmt.Fprintf(w, "\nRun '%s <%s> -h' for a %s's flags.\n", program, noun, noun)
}

// Find returns the command of cmds named name.
func Find(cmds []Command, name string) (Command, bool) {
	for _, c := range cmds {
		if c.Name == name {
			return c, true
		}
	}
	return Command{}, false
}
