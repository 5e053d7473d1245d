package checkpoint

import (
	"errors"
	"fmt"
)

// Sentinels for errors.Is. Every error this package returns wraps one of them (or a context error), so a
// caller can tell a damaged checkpoint from a model mismatch from an I/O failure without parsing messages.
var (
	// ErrHeader marks a shard whose safetensors header is malformed or does not fit the file.
	ErrHeader = errors.New("checkpoint: bad safetensors header")
	// ErrIndex marks a model.safetensors.index.json that is malformed or disagrees with the shards.
	ErrIndex = errors.New("checkpoint: bad index")
	// ErrMismatch marks a checkpoint whose tensors are not the ones the model needs (see MismatchError).
	ErrMismatch = errors.New("checkpoint: tensors do not match the model")
	// ErrShortRead marks a read that ended before the tensor did (a shard truncated after Open).
	ErrShortRead = errors.New("checkpoint: short read")
	// ErrArgument marks a call with inconsistent arguments (buffer sizes, shapes, unknown tensors).
	ErrArgument = errors.New("checkpoint: bad argument")
	// ErrMXFP4 marks MXFP4 data that cannot be decoded exactly (a NaN scale, a value past float32).
	ErrMXFP4 = errors.New("checkpoint: bad MXFP4 data")
)

// FileError is a problem found in one file of the checkpoint, and in one tensor of it when Tensor is set.
// It renders as `model-00003-of-000096.safetensors: tensor NAME: MSG` and unwraps to Kind.
type FileError struct {
	File   string // base name of the shard or index file
	Tensor string // the tensor concerned, or "" for a file-level problem
	Msg    string // what is wrong, with the expected and actual values
	Kind   error  // ErrHeader or ErrIndex
}

func (e *FileError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("%s: tensor %s: %s", e.File, e.Tensor, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Unwrap returns the sentinel the error belongs to.
func (e *FileError) Unwrap() error { return e.Kind }

// ReadError is a failed read of tensor data: the file, the tensor, the absolute offset of the failed
// segment, and the cause (an *os.PathError, or io.ErrUnexpectedEOF for a short read, which also matches
// ErrShortRead).
type ReadError struct {
	File   string
	Tensor string
	Offset int64 // absolute file offset of the segment that failed
	Len    int64 // bytes asked for
	Got    int64 // bytes delivered before the failure
	Err    error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("%s: tensor %s: read of %d bytes at offset %d: got %d: %v",
		e.File, e.Tensor, e.Len, e.Offset, e.Got, e.Err)
}

// Unwrap returns the cause and, for a short read, ErrShortRead.
func (e *ReadError) Unwrap() []error {
	if e.Got < e.Len {
		return []error{e.Err, ErrShortRead}
	}
	return []error{e.Err}
}

// errorList gathers problems found while validating, so that one run reports all of them (a directory
// with three damaged shards says so at once) while capping what is kept when everything is wrong.
type errorList struct {
	errs    []error
	dropped int
}

// maxListed bounds the errors an errorList keeps; the rest are counted.
const maxListed = 50

func (l *errorList) add(err error) {
	if len(l.errs) < maxListed {
		l.errs = append(l.errs, err)
		return
	}
	l.dropped++
}

func (l *errorList) err() error {
	if l.dropped > 0 {
		return errors.Join(append(l.errs, fmt.Errorf("... and %d more problems", l.dropped))...)
	}
	return errors.Join(l.errs...)
}
