// Command potato replays Kimi K3 teacher-forced and read-only: it writes and audits checkpoints, tokenizes
// text and conversations, replays token sequences through the model and serves notebooks.
//
// Run `potato help` for the list of subcommands and `potato CMD -h` for the flags of one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand: its one-line summary and the function that runs it with the arguments that
// follow its name. Output goes to stdout; errors are returned, never printed and exited on.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

// commands is the table of subcommands. Each lives in its own file, named after it.
var commands = map[string]command{}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal asks the command to stop cleanly (serve finishes its wave, a job its part); a second
	// one gets the default behaviour back and ends the process at once.
	go func() { <-ctx.Done(); stop() }()
	err := run(ctx, os.Args[1:], os.Stdout)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "potato:", err)
	}
	os.Exit(exitCode(err))
}

// exitCode is 0 for success and for -h (help asked for is not a failure), 1 for any other error.
func exitCode(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 1
}

// run dispatches args to the named subcommand.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 2 && args[0] == "help" { // potato help CMD is potato CMD -h
		if _, ok := commands[args[1]]; ok {
			args = []string{args[1], "-h"}
		}
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return nil
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		usage(os.Stderr)
		return fmt.Errorf("unknown command %q", args[0])
	}
	return cmd.run(ctx, args[1:], stdout)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: potato COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}
