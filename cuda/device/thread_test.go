package device

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
)

// TestThread: closures run in order on one thread, a panic comes back as ErrInternal and leaves the
// thread usable, a failed init is returned, and after Close every call returns ErrClosed. No GPU needed.
func TestThread(t *testing.T) {
	initErr := errors.New("init failed")
	if _, err := NewThread(func() error { return initErr }); !errors.Is(err, initErr) {
		t.Fatalf("NewThread with a failing init: %v, want %v", err, initErr)
	}
	th, err := NewThread(func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	for i := range 3 {
		if err := th.Do(func() error { order = append(order, i); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if len(order) != 3 || order[0] != 0 || order[2] != 2 {
		t.Errorf("closures ran as %v, want [0 1 2]", order)
	}
	if err := th.Do(func() error { panic("boom") }); !errors.Is(err, ErrInternal) {
		t.Errorf("a panicking closure: %v, want ErrInternal", err)
	}
	if err := th.Do(func() error { runtime.Gosched(); return nil }); err != nil {
		t.Errorf("after a panic: %v", err)
	}
	lastRan := false
	if err := th.Close(func() error { lastRan = true; return nil }); err != nil || !lastRan {
		t.Errorf("Close: %v (last ran %v)", err, lastRan)
	}
	if err := th.Do(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close: %v, want ErrClosed", err)
	}
	if err := th.Close(func() error { return nil }); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// TestParallelCopy: large copies split over goroutines copy every byte, small ones too, and the count
// is the shorter length.
func TestParallelCopy(t *testing.T) {
	for _, n := range []int{0, 1, parallelCopyMin - 1, parallelCopyMin, 3*parallelCopyMin + 12345} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*7 + i>>11)
		}
		dst := make([]byte, n+5)
		if got := ParallelCopy(dst, src); got != n {
			t.Errorf("%d bytes: copied %d", n, got)
		}
		if !bytes.Equal(dst[:n], src) {
			t.Errorf("%d bytes: the copy differs", n)
		}
	}
}
