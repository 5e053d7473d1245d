package cuda

import (
	"errors"
	"fmt"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestErrorIs: every driver error is ErrCUDA; only an allocation failure is ops.ErrOutOfMemory (which
// makes the engine retry a wave as smaller waves) once an op returns it (withOOM, in Backend.run), also
// when wrapped further. No GPU needed.
func TestErrorIs(t *testing.T) {
	oom := fmt.Errorf("layer 3: %w", withOOM(fmt.Errorf("cuda: MatMul: %w", &Error{Call: "cuMemAllocAsync(1 bytes)", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"})))
	fault := withOOM(&Error{Call: "cuStreamSynchronize", Code: 700, Name: "CUDA_ERROR_ILLEGAL_ADDRESS"})
	for _, tc := range []struct {
		err       error
		cuda, mem bool
	}{{oom, true, true}, {fault, true, false}, {ErrShape, false, false}} {
		if got := errors.Is(tc.err, ErrCUDA); got != tc.cuda {
			t.Errorf("errors.Is(%v, ErrCUDA) = %v", tc.err, got)
		}
		if got := errors.Is(tc.err, ops.ErrOutOfMemory); got != tc.mem {
			t.Errorf("errors.Is(%v, ops.ErrOutOfMemory) = %v", tc.err, got)
		}
	}
}
