package cuda_test

import (
	"fmt"
	"log"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Pick the CUDA backend when this machine has a GPU, else the CPU backend; then run an op. (Not run as
// a test: its output depends on the machine.)
func ExampleNew() {
	var b ops.Backend
	if err := cuda.Available(); err != nil {
		log.Printf("no GPU, using the CPU backend: %v", err)
		b = cpu.New(cpu.Options{Precision: ops.BF16})
	} else {
		g, err := cuda.New(cuda.Options{Precision: ops.BF16, Device: 0})
		if err != nil {
			log.Fatal(err)
		}
		defer g.Close()
		b = g
	}
	x, _ := b.FromHost(1, 2, []float32{1, 2})
	w, _ := b.FromHost(1, 2, []float32{3, 4})
	y, _ := b.MatMul(x, w)
	v, _ := b.ToHost(y)
	fmt.Println(b.Name(), v) // cuda [11] or cpu [11]
}
