package datasets

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is matched (errors.Is) by every *Error: the input is not a conversation this package
// accepts. I/O errors are returned as they are and do not match it.
var ErrInvalid = errors.New("datasets: invalid conversation")

// ErrCorrupt is matched by the errors a Cache reports for an entry it could not read back; the entry is
// removed and the lookup is a miss.
var ErrCorrupt = errors.New("datasets: corrupt cache entry")

// Error says where a conversation in a file is wrong: the file, the line (JSONL) or row (Parquet), and the
// field, written as a path such as messages[2].tool_calls[0].function.name.
type Error struct {
	File  string // the name the reader was given; "" when unknown
	Unit  string // "line" for JSONL, "row" for Parquet, "item" for a JSON array
	Line  int    // 1-based line, row or item number; 0 when not known
	Field string // path of the offending field; "" for the whole line
	Err   error  // what is wrong with it
}

// Error reads like "datasets: chats.jsonl line 3: messages[2].role: unknown role "bot" (...)".
func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		unit := e.Unit
		if unit == "" {
			unit = "line"
		}
		loc = strings.TrimSpace(fmt.Sprintf("%s %s %d", loc, unit, e.Line))
	}
	s := "datasets: "
	if loc != "" {
		s += loc + ": "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports that every *Error is an ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// fieldError is an error about one field, before the reader knows the file and line; the reader turns
// it into an *Error.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.field + ": " + e.err.Error() }

// errorf makes a fieldError for field with a formatted message.
func errorf(field, format string, args ...any) error {
	return &fieldError{field: field, err: fmt.Errorf(format, args...)}
}

// locate turns err (a fieldError or any other) into an *Error at file and line.
func locate(err error, file, unit string, line int) *Error {
	var fe *fieldError
	if errors.As(err, &fe) {
		return &Error{File: file, Unit: unit, Line: line, Field: fe.field, Err: fe.err}
	}
	return &Error{File: file, Unit: unit, Line: line, Err: err}
}
