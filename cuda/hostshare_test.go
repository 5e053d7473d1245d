package cuda

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestAdoptHost: a second backend (the same device opened twice, as `--devices 0,0`) adopts the first's
// pinned buffer: it then copies from it as pinned, uploads the same values as from ordinary memory,
// refuses to free it or mark it stable, does not free it at its Close, and forgets it on ForgetHost, after
// which the owner frees it.
func TestAdoptHost(t *testing.T) {
	owner := testBackend(t, Options{Precision: ops.FP32})
	other := testBackend(t, Options{Precision: ops.FP32})
	const rows, cols = 3, 257
	buf, err := owner.AllocHost(4 * rows * cols)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows * cols {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(i)*0.25-7))
	}
	if other.pinned(buf) {
		t.Fatal("the other backend takes the owner's buffer as pinned before AdoptHost")
	}
	if err := other.AdoptHost(buf); err != nil {
		t.Fatal(err)
	}
	if !other.pinned(buf[100:200]) {
		t.Error("after AdoptHost the buffer is not pinned for the other backend")
	}
	if err := other.AdoptHost(buf); err == nil {
		t.Error("a second AdoptHost of the same buffer was accepted")
	}
	if err := other.MarkStable(buf); err == nil {
		t.Error("MarkStable of an adopted buffer was accepted")
	}
	if err := other.FreeHost(buf); err == nil {
		t.Error("FreeHost of an adopted buffer was accepted by the backend that adopted it")
	}
	x, err := other.Upload(ops.WeightF32, rows, cols, buf)
	if err != nil {
		t.Fatal(err)
	}
	y, err := other.Upload(ops.WeightF32, rows, cols, slices.Clone(buf))
	if err != nil {
		t.Fatal(err)
	}
	gx, err := other.ToHost(x)
	if err != nil {
		t.Fatal(err)
	}
	gy, err := other.ToHost(y)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gx, gy) || gx[5] != 5*0.25-7 {
		t.Errorf("upload from the adopted buffer gave %v..., from ordinary memory %v...", gx[:6], gy[:6])
	}
	other.Free(x)
	other.Free(y)
	other.ForgetHost(buf)
	if other.pinned(buf) {
		t.Error("after ForgetHost the buffer is still pinned for the other backend")
	}
	// A backend closed with a buffer still adopted leaves it to its owner.
	third, err := New(Options{Precision: ops.FP32})
	if err != nil {
		t.Fatal(err)
	}
	if err := third.AdoptHost(buf); err != nil {
		t.Fatal(err)
	}
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
	if err := owner.FreeHost(buf); err != nil {
		t.Errorf("the owner's FreeHost after the others let go: %v", err)
	}
}
