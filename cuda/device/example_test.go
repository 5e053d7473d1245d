package device_test

import (
	"fmt"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/cuda/device"
)

// A device on its own CUDA thread: Open makes the context current there, and every call after runs
// through Do. (Compiled, not run: it needs a GPU.)
func Example() {
	drv, err := bind.LoadDriver()
	if err != nil {
		fmt.Println(err)
		return
	}
	var dv *device.Device
	th, err := device.NewThread(func() error {
		var err error
		dv, err = device.Open(drv, 0, true)
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = th.Do(func() error {
		p, err := dv.Malloc(1 << 20) // ordered on dv.Stream
		if err != nil {
			return err
		}
		if err := dv.ToDevice(p, make([]byte, 1<<20)); err != nil {
			return err
		}
		return dv.Free(p)
	})
	fmt.Println(err, th.Close(dv.Close))
}
