package bind_test

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// Loading the driver and calling an entry point: the result code goes through Check, which names the
// call. Without a GPU LoadDriver's error wraps ErrUnavailable and says what is missing. (Compiled, not
// run: it needs a GPU.)
func Example() {
	d, err := bind.LoadDriver()
	if errors.Is(err, bind.ErrUnavailable) {
		fmt.Println("no CUDA here:", err)
		return
	}
	var v int32
	if err := d.Check("cuDriverGetVersion", bind.Call(d.CuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		fmt.Println(err) // cuda: cuDriverGetVersion: CUDA_ERROR_... (n): ...
		return
	}
	fmt.Printf("driver %s, %d devices\n", bind.VersionString(int(v)), d.Devices)
}
