package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// segTestSize is a small segment so that modest tensors span many segments, with unaligned ends.
const segTestSize = 4096

// readSizes straddle segment and alignment boundaries.
var readSizes = []int64{0, 1, 7, 4095, 4096, 4097, 3*4096 + 17, 100_003}

// writeReadModel writes one unsharded shard with a U8 tensor of each of readSizes, returns the dir.
func writeReadModel(t testing.TB, dir string) []tt {
	var tensors []tt
	for i, n := range readSizes {
		tensors = append(tensors, tt{name: fmt.Sprintf("t%d", i), dtype: U8, shape: []int64{n}})
	}
	writeFile(t, dir, SingleFile, shardBytes(tensors))
	return tensors
}

// readModes are the ways a Dir can read; each read test runs under all of them.
var readModes = []struct {
	name string
	opts []Option
}{
	{"buffered", []Option{WithSegmentSize(segTestSize)}},
	{"direct", []Option{WithSegmentSize(segTestSize), WithDirectIO(true)}},
	{"buffered one worker", []Option{WithSegmentSize(segTestSize), WithReadConcurrency(1)}},
}

func TestReadInto(t *testing.T) {
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			tensors := writeReadModel(t, dir)
			d, err := Open(dir, mode.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			checkReads(t, d, tensors)
		})
	}
}

// checkReads reads every tensor alone, then all in one batch, then from concurrent goroutines, and
// compares bytes and counters.
func checkReads(t *testing.T, d *Dir, tensors []tt) {
	t.Helper()
	var total int64
	reqs := make([]ReadRequest, len(tensors))
	for i, x := range tensors {
		tn, _ := d.Lookup(x.name)
		dst := make([]byte, tn.Size)
		if err := d.ReadInto(t.Context(), tn, dst); err != nil {
			t.Fatalf("ReadInto(%s): %v", x.name, err)
		}
		if !bytes.Equal(dst, x.bytes()) {
			t.Errorf("ReadInto(%s): bytes differ", x.name)
		}
		reqs[i] = ReadRequest{Tensor: tn, Dst: make([]byte, tn.Size)}
		total += tn.Size
	}
	if err := d.ReadBatch(t.Context(), reqs); err != nil {
		t.Fatal(err)
	}
	for i, rq := range reqs {
		if !bytes.Equal(rq.Dst, tensors[i].bytes()) {
			t.Errorf("ReadBatch: %s: bytes differ", rq.Tensor.Name)
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		mine := make([]ReadRequest, len(reqs))
		for i, rq := range reqs {
			mine[i] = ReadRequest{Tensor: rq.Tensor, Dst: make([]byte, len(rq.Dst))}
		}
		wg.Go(func() {
			if err := d.ReadBatch(context.Background(), mine); err != nil {
				t.Error(err)
			}
			for i, rq := range mine {
				if !bytes.Equal(rq.Dst, tensors[i].bytes()) {
					t.Errorf("concurrent ReadBatch: %s: bytes differ", rq.Tensor.Name)
				}
			}
		})
	}
	wg.Wait()
	st := d.Stats()
	if n := int64(len(tensors)); st.Tensors != 6*n || st.Bytes != 6*total || st.DeviceBytes < st.Bytes {
		t.Errorf("Stats = %+v, want %d tensors and %d bytes", st, 6*n, 6*total)
	}
}

// TestReadIntoAlignedDestination reads into a buffer placed so that O_DIRECT can fill the middle
// segments in place (no bounce copy) and checks the bytes.
func TestReadIntoAlignedDestination(t *testing.T) {
	dir := t.TempDir()
	tensors := writeReadModel(t, dir)
	d, err := Open(dir, WithSegmentSize(segTestSize), WithDirectIO(true))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	x := tensors[len(tensors)-1]
	tn, _ := d.Lookup(x.name)
	skew := int(tn.Offset % DirectAlignment)
	dst := AlignedBuffer(int(tn.Size)+DirectAlignment, DirectAlignment)[skew : skew+int(tn.Size)]
	if err := d.ReadInto(t.Context(), tn, dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, x.bytes()) {
		t.Error("bytes differ")
	}
	// The first and last segments are partial blocks and must bounce; the middle ones must not.
	if st := d.Stats(); st.Fallbacks == 0 && (st.Bounced != 2 || st.Direct < 20) {
		t.Errorf("Stats = %+v, want 2 bounced of about 26 direct segments", st)
	}
}

func TestReadShortAfterTruncation(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprint("direct=", direct), func(t *testing.T) {
			dir := t.TempDir()
			tensors := writeReadModel(t, dir)
			// One read at a time: the failing segment, not a later one racing it, reports.
			d, err := Open(dir, WithSegmentSize(segTestSize), WithDirectIO(direct), WithReadConcurrency(1))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			last, _ := d.Lookup(tensors[len(tensors)-1].name)
			// Someone truncates the shard after Open validated it: 10 bytes of the last tensor remain.
			if err := os.Truncate(filepath.Join(dir, SingleFile), last.Offset+10); err != nil {
				t.Fatal(err)
			}
			err = d.ReadInto(t.Context(), last, make([]byte, last.Size))
			var re *ReadError
			if !errors.As(err, &re) || !errors.Is(err, ErrShortRead) || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("got %v, want a *ReadError matching ErrShortRead and io.ErrUnexpectedEOF", err)
			}
			first := min(last.Size, segTestSize-last.Offset%segTestSize) // the first segment ends at a boundary
			want := fmt.Sprintf("%s: tensor %s: read of %d bytes at offset %d: got 10: unexpected EOF",
				SingleFile, last.Name, first, last.Offset)
			if err.Error() != want {
				t.Errorf("error\n got: %s\nwant: %s", err, want)
			}
		})
	}
}

func TestReadArguments(t *testing.T) {
	d := openSmall(t)
	tn, _ := d.Lookup("language_model.lm_head.weight")
	forged := tn
	forged.Offset = 1 << 40
	foreign := tn
	foreign.File = "other.safetensors"
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		t    Tensor
		dst  []byte
		is   error
		want string
	}{
		{"short buffer", t.Context(), tn, make([]byte, 3), ErrArgument, "buffer of 3 bytes, want 256"},
		{"forged offset", t.Context(), forged, make([]byte, 256), ErrArgument, "are outside the data of"},
		{"foreign shard", t.Context(), foreign, make([]byte, 256), ErrArgument, `shard "other.safetensors" is not part of`},
		{"cancelled", cancelled, tn, make([]byte, 256), context.Canceled, "context canceled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := d.ReadInto(tc.ctx, tc.t, tc.dst)
			if !errors.Is(err, tc.is) || !strings.Contains(fmt.Sprint(err), tc.want) {
				t.Errorf("got %v, want %v containing %q", err, tc.is, tc.want)
			}
		})
	}
}

func TestAlignedBuffer(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 4096, 1 << 20} {
		b := AlignedBuffer(n, DirectAlignment)
		if len(b) != n || cap(b) != n || (n > 0 && alignOffset(b, DirectAlignment) != 0) {
			t.Errorf("AlignedBuffer(%d): len %d cap %d misaligned by %d", n, len(b), cap(b), alignOffset(b, DirectAlignment))
		}
	}
}
