package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// deviceList is --devices (replay, bench, serve): the devices a wave's sequences are spread over, which
// share one read of the weights. A device named twice is opened twice (`--devices 0,0`: two contexts on
// one GPU, each on its own OS thread, to check the orchestration on a single GPU); on the cpu backend
// each entry is another CPU backend.
type deviceList []int

// String implements flag.Value.
func (d *deviceList) String() string {
	var s []string
	for _, n := range *d {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ",")
}

// Set implements flag.Value.
func (d *deviceList) Set(v string) error {
	var out deviceList
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a device ordinal (want 0,1,...)", f)
		}
		out = append(out, n)
	}
	*d = out
	return nil
}

// devicesUsage is the help of --devices.
const devicesUsage = "devices to spread each wave's sequences over, e.g. 0,1,2,3: one read of the weights feeds them all " +
	"(0,0 opens device 0 twice, to check this on one GPU: each then plans for half of the card, unless --device-memory says otherwise); results do not depend on it (default 0)"

// newBackends makes one backend of the named kind per device of devs (device 0 alone when devs is
// empty): the first for the engine, the others for EngineOptions.Devices. close releases them all.
func newBackends(name string, prec ops.Precision, tune backendTuning) (ops.Backend, []ops.Backend, func(), error) {
	devs := tune.devices
	if len(devs) == 0 {
		devs = deviceList{0}
	}
	var bs []ops.Backend
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	for _, d := range devs {
		t := tune
		t.device = d
		b, closeB, err := newBackend(name, prec, t)
		if err != nil {
			closeAll()
			if len(devs) > 1 {
				err = fmt.Errorf("device %d: %w", d, err)
			}
			return nil, nil, nil, err
		}
		bs = append(bs, b)
		if closeB != nil {
			closers = append(closers, closeB)
		}
	}
	if len(closers) == 0 {
		return bs[0], bs[1:], nil, nil
	}
	return bs[0], bs[1:], closeAll, nil
}

// shareDevices gives each engine of a device named more than once its part of the card when no
// --device-memory says otherwise: the free memory now less the planner's 10% margin, divided by the
// times it is named (every engine would otherwise plan for the whole card). It says so on w.
func shareDevices(w io.Writer, devs deviceList, first ops.Backend, others []ops.Backend, opts *replay.EngineOptions) error {
	if opts.DeviceMemory > 0 || len(devs) < 2 {
		return nil
	}
	named := map[int]int{}
	most := 0
	for _, d := range devs {
		named[d]++
		most = max(most, named[d])
	}
	if most < 2 {
		return nil
	}
	dm, ok := first.(ops.DeviceMemory)
	if !ok { // the CPU: its "device" is host memory, planned as on one device
		return nil
	}
	free, err := dm.FreeDeviceMemory()
	if err != nil {
		return fmt.Errorf("--devices %s: free device memory: %w", devs.String(), err)
	}
	if free <= 0 {
		return errors.New("--devices: the device reports no free memory")
	}
	opts.DeviceMemory = int64(float64(free)*0.9) / int64(most)
	fmt.Fprintf(w, "--devices %s: a device named %d times: each engine plans for %.1f GB of its memory (--device-memory to choose)\n",
		devs.String(), most, float64(opts.DeviceMemory)/1e9)
	return nil
}

// printDevices writes what each device ran in the last wave, when there are several.
func printDevices(w io.Writer, l *loaded) {
	per := l.engine.DeviceStats()
	if len(per) < 2 {
		return
	}
	var parts []string
	for d, st := range per {
		parts = append(parts, fmt.Sprintf("device %d: %s, %s, %.1f MB uploaded", d, numtext.Count(st.Sequences, "sequence"), numtext.Count(st.Tokens, "token"), float64(st.BytesRead())/1e6))
	}
	fmt.Fprintf(w, "over %d devices, the weights read once: %s\n", len(per), strings.Join(parts, "; "))
}

// printMemoryPeak prints the device memory the CUDA backend took at its most over the timed waves, by the
// driver's counts (cuda.MemoryPeak), to set beside the plan line's device peak: nvidia-smi's peak counts
// the freed blocks the backend's pool keeps, and read the whole 80 GB card where a plan counted 74.7 GB.
func printMemoryPeak(w io.Writer, cb *cuda.Backend) error {
	m, err := cb.MemoryPeak()
	if err != nil {
		return fmt.Errorf("device memory peak: %w", err)
	}
	fmt.Fprintf(w, "device memory over the timed waves: allocated at most %s (the pool's %s, and %s outside it: kept scratch, workspaces, modules and the context); the pool held up to %s of the device (freed blocks it keeps included, which nvidia-smi counts as used)\n",
		numtext.Bytes(m.Allocated()), numtext.Bytes(m.PoolUsed), numtext.Bytes(m.Outside), numtext.Bytes(m.PoolReserved))
	return nil
}
