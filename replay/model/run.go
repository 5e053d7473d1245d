package model

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// run chains the backend calls of one sublayer: after the first error every later call is skipped, errors
// carry the name of the weight or step that failed, and every intermediate is freed when the sublayer ends
// (the GPU backend's memory depends on it).
type run struct {
	b     ops.Backend
	err   error
	temps []ops.Tensor
}

func newRun(b ops.Backend) *run { return &run{b: b} }

// do runs one step and keeps its result for freeing.
func (r *run) do(name string, step func() (ops.Tensor, error)) ops.Tensor {
	t := r.result(name, step)
	if t != nil {
		r.temps = append(r.temps, t)
	}
	return t
}

// result runs the step that makes the sublayer's output, which outlives the run.
func (r *run) result(name string, step func() (ops.Tensor, error)) ops.Tensor {
	if r.err != nil {
		return nil
	}
	t, err := step()
	if err != nil {
		r.err = fmt.Errorf("%s: %w", name, err)
		return nil
	}
	return t
}

// mm is x times w transposed, kept.
func (r *run) mm(x, w ops.Tensor, name string) ops.Tensor {
	return r.do(name, func() (ops.Tensor, error) { return r.b.MatMul(x, w) })
}

// mmNarrow is mm through the backend's ops.NarrowMatMuler where it has one: the same values, kept for
// a reader that takes them narrow (a KDA projection's short convolution).
func (r *run) mmNarrow(x, w ops.Tensor, name string) ops.Tensor {
	nm, ok := r.b.(ops.NarrowMatMuler)
	if !ok {
		return r.mm(x, w, name)
	}
	return r.do(name, func() (ops.Tensor, error) { return nm.MatMulNarrow(x, w) })
}

// free releases the intermediates.
func (r *run) free() {
	for _, t := range r.temps {
		r.b.Free(t)
	}
	r.temps = nil
}

// drop frees intermediates the sublayer no longer needs before it ends, so that fewer are alive at its
// peak (the per-token activations bound how many tokens a slice may hold).
func (r *run) drop(ts ...ops.Tensor) {
	for _, t := range ts {
		if t == nil {
			continue
		}
		for i, x := range r.temps {
			if x == t {
				r.temps = append(r.temps[:i], r.temps[i+1:]...)
				r.b.Free(t)
				break
			}
		}
	}
}
