package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// usageError is a mistake in the command line itself (a flag that does not parse, an unknown command, an
// argument where none belongs, a required flag missing): exit status 2, as Go's flag package exits, where
// a failure of the work is 1. main prints it once and points at the help (potato help CMD) rather than
// printing the help itself; with list, the list of commands follows it (potato with no command).
type usageError struct {
	cmd  string // the command whose help to point at; "" for potato help
	err  error
	list bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usageError of cmd with the formatted message.
func usagef(cmd, format string, a ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, a...)}
}

// newFlags returns the flag set of a command whose help (-h, potato help CMD) is head, then its flags
// named with two dashes as the docs name them. head starts with the usage line ("usage: potato CMD
// ...") and ends with a newline.
func newFlags(name, head string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), head)
		fmt.Fprintln(fs.Output(), "\nflags:")
		printFlags(fs)
	}
	return fs
}

// printFlags is fs.PrintDefaults with each flag named --name, as the docs and the error messages name it
// (the flag package takes one dash or two alike, and prints one).
func printFlags(fs *flag.FlagSet) {
	w := fs.Output()
	var b bytes.Buffer
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(w)
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if strings.HasPrefix(line, "  -") { // a flag's name line; its help lines start with "    \t"
			line = "  --" + line[3:]
		}
		io.WriteString(w, line)
	}
}

// parseFlags parses a command's args. Help asked for (-h, --help) is printed on stdout, where `potato
// help CMD | less` finds it, and returns flag.ErrHelp (exit status 0). A flag that does not parse is a
// usageError saying which, the flag named --name: the flag package's own message and usage dump (the
// error, sixty lines of flags, then the error again from main) are not printed.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return err
	}
	cmd, _, _ := strings.Cut(fs.Name(), " ")
	return &usageError{cmd: cmd, err: fmt.Errorf("%s: %s", fs.Name(), twoDashes(err.Error()))}
}

// parseInterspersed is parseFlags for a command that takes arguments besides its flags (files, a
// directory): flags may come after them too (`potato show r.tokens.arrow --rows 1`), where the flag
// package alone stops at the first argument and would read "--rows" as a file. After "--" every word
// is an argument. It returns the arguments, in order.
func parseInterspersed(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args, stdout); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// twoDashes rewrites the flag package's messages to name the flag --name, as the help does: "invalid
// value "24g" for flag -device-memory: ..." becomes "... for flag --device-memory: ...". The quoted value
// is skipped exactly (strconv.QuotedPrefix), so that nothing inside it is rewritten; other messages are
// left as they are.
func twoDashes(msg string) string {
	for _, p := range []string{"flag provided but not defined: -", "flag needs an argument: -"} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return p + "-" + rest
		}
	}
	for _, p := range []struct{ head, mid string }{{"invalid value ", " for flag -"}, {"invalid boolean value ", " for -"}} {
		rest, ok := strings.CutPrefix(msg, p.head)
		if !ok {
			continue
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil || !strings.HasPrefix(rest[len(q):], p.mid) {
			continue
		}
		return p.head + q + p.mid + "-" + rest[len(q)+len(p.mid):]
	}
	return msg
}

// intFlag is a numeric flag's name and value, for checkNotNegative and checkPositive.
type intFlag struct {
	name string
	v    int
}

// checkNotNegative refuses the first of flags below 0: "cmd: --name -1 is negative".
func checkNotNegative(cmd string, flags ...intFlag) error {
	for _, f := range flags {
		if f.v < 0 {
			return fmt.Errorf("%s: %s %d is negative", cmd, f.name, f.v)
		}
	}
	return nil
}

// checkPositive refuses the first of flags below 1: "cmd: --name 0 must be positive".
func checkPositive(cmd string, flags ...intFlag) error {
	for _, f := range flags {
		if f.v < 1 {
			return fmt.Errorf("%s: %s %d must be positive", cmd, f.name, f.v)
		}
	}
	return nil
}
