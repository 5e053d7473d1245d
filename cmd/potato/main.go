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
	report(os.Stderr, err)
	os.Exit(exitCode(err))
}

// exitCode follows Go's flag package: 0 for success and for help asked for (-h, potato help), 2 for a
// mistake in the command line (usageError: a flag that does not parse, an unknown command), 1 for any
// other error.
func exitCode(err error) int {
	var u *usageError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &u):
		return 2
	}
	return 1
}

// report prints err on w once; a usage error is followed by where its help is, or by the list of
// commands (potato alone).
func report(w io.Writer, err error) {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return
	}
	fmt.Fprintln(w, "potato:", err)
	var u *usageError
	switch {
	case !errors.As(err, &u):
	case u.list:
		fmt.Fprintln(w)
		usage(w)
	case u.cmd == "":
		fmt.Fprintln(w, "run potato help for the commands")
	default:
		fmt.Fprintf(w, "run potato help %s for its usage and flags\n", u.cmd)
	}
}

// run dispatches args to the named subcommand. Help asked for (potato help, potato help CMD, potato CMD
// -h) goes to stdout; potato alone, which asks for nothing, is a usage error (exit status 2) with the list
// of commands on stderr, as the go command does.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return &usageError{err: errors.New("no command given"), list: true}
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		switch {
		case len(args) == 1:
			usage(stdout)
			return nil
		case len(args) > 2:
			return usagef("", "help: want one command, got %q", args[1:])
		}
		if _, ok := commands[args[1]]; !ok {
			return usagef("", "help: unknown command %q", args[1])
		}
		args = []string{args[1], "-h"} // potato help CMD is potato CMD -h
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return usagef("", "unknown command %q", args[0])
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
	fmt.Fprintln(w, "\npotato help CMD (or potato CMD -h) prints the usage and flags of one.")
}
