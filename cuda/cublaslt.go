package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// ltHandle is a cuBLASLt handle with the one matmul descriptor the backend uses: D = op(A) op(B) with
// A^T (the weight, k x m column-major = m x k row-major), float32 accumulation and float32 alpha, beta.
type ltHandle struct {
	lib    *bind.CuBLASLt
	handle uintptr // cublasLtHandle_t
	desc   uintptr // cublasLtMatmulDesc_t
	ws     uint64  // device workspace of ltWorkspaceAlloc bytes (cuMemAlloc, freed by the backend's release)
	shapes map[ltKey]*ltShape
	// batches are the batched shapes' plans (cublaslt_batch.go)
	batches map[ltBatchKey]*ltShape
}

// newLtHandle creates the handle and the matmul descriptor (on the CUDA thread, context current).
func newLtHandle(l *bind.CuBLASLt) (*ltHandle, error) {
	h := &ltHandle{lib: l, shapes: map[ltKey]*ltShape{}, batches: map[ltBatchKey]*ltShape{}}
	if err := l.Check("cublasLtCreate", bind.Call(l.Create, uintptr(unsafe.Pointer(&h.handle)))); err != nil {
		return nil, err
	}
	if err := l.Check("cublasLtMatmulDescCreate", bind.Call(l.MatmulDescCreate, uintptr(unsafe.Pointer(&h.desc)), bind.LtCompute32F, bind.R32F)); err != nil {
		return nil, errors.Join(err, h.close())
	}
	for _, a := range []struct {
		name string
		attr uintptr
		v    int32
	}{{"TRANSA", bind.LtDescTransA, bind.LtOpT}, {"TRANSB", bind.LtDescTransB, bind.LtOpN}} {
		v := a.v
		if err := l.Check("cublasLtMatmulDescSetAttribute("+a.name+")", bind.Call(l.MatmulDescSetAttribute, h.desc, a.attr, uintptr(unsafe.Pointer(&v)), 4)); err != nil {
			return nil, errors.Join(err, h.close())
		}
	}
	return h, nil
}

// close destroys the layouts of every planned shape, the descriptor and the handle.
func (h *ltHandle) close() error {
	l := h.lib
	var errs []error
	all := make([]*ltShape, 0, len(h.shapes)+len(h.batches))
	for _, s := range h.shapes {
		all = append(all, s)
	}
	for _, s := range h.batches {
		all = append(all, s)
	}
	for _, s := range all {
		if s.adesc != 0 {
			errs = append(errs, l.Check("cublasLtMatrixLayoutDestroy", bind.Call(l.MatrixLayoutDestroy, s.adesc)))
			s.adesc = 0
		}
	}
	if h.desc != 0 {
		errs = append(errs, l.Check("cublasLtMatmulDescDestroy", bind.Call(l.MatmulDescDestroy, h.desc)))
		h.desc = 0
	}
	if h.handle != 0 {
		errs = append(errs, l.Check("cublasLtDestroy", bind.Call(l.Destroy, h.handle)))
		h.handle = 0
	}
	return errors.Join(errs...)
}

// layout creates a column-major matrix layout of rows x cols elements of type dt, leading dimension ld.
func (h *ltHandle) layout(dt uintptr, rows, cols, ld int) (uintptr, error) {
	var p uintptr
	err := h.lib.Check(fmt.Sprintf("cublasLtMatrixLayoutCreate(%dx%d, ld %d)", rows, cols, ld),
		bind.Call(h.lib.MatrixLayoutCreate, uintptr(unsafe.Pointer(&p)), dt, uintptr(rows), uintptr(cols), uintptr(ld)))
	return p, err
}

// dropLayout destroys a layout (0 is a no-op).
func (h *ltHandle) dropLayout(p uintptr) error {
	if p == 0 {
		return nil
	}
	return h.lib.Check("cublasLtMatrixLayoutDestroy", bind.Call(h.lib.MatrixLayoutDestroy, p))
}

// configGet reads an algo configuration attribute of size bytes into v (a pointer to a value of that size).
func (h *ltHandle) configGet(a *bind.Algo, attr uintptr, v unsafe.Pointer, size uintptr) error {
	var written uintptr
	return h.lib.Check(fmt.Sprintf("cublasLtMatmulAlgoConfigGetAttribute(%d)", attr),
		bind.Call(h.lib.MatmulAlgoConfigGetAttribute, uintptr(unsafe.Pointer(a)), attr, uintptr(v), size, uintptr(unsafe.Pointer(&written))))
}

// configSet writes an algo configuration attribute.
func (h *ltHandle) configSet(a *bind.Algo, attr uintptr, v unsafe.Pointer, size uintptr) error {
	return h.lib.Check(fmt.Sprintf("cublasLtMatmulAlgoConfigSetAttribute(%d)", attr),
		bind.Call(h.lib.MatmulAlgoConfigSetAttribute, uintptr(unsafe.Pointer(a)), attr, uintptr(v), size))
}
