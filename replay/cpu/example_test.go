package cpu_test

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// A matrix product in bf16 precision: the exact sum 1*3 + 2*4.5 = 12 and 1.00390625 (not a bfloat16
// value) rounds to 1.
func Example() {
	b := cpu.New(cpu.Options{Precision: ops.BF16})
	x, _ := b.FromHost(2, 2, []float32{1, 2, 1.00390625, 0})
	w, _ := b.FromHost(1, 2, []float32{3, 4.5})
	y, err := b.MatMul(x, w) // y[i,j] = rounded(sum_k x[i,k] w[j,k])
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := b.ToHost(y)
	fmt.Println(y.Rows(), y.Cols(), out)
	// Output: 2 1 [12 3]
}
