package main

import (
	"flag"
	"fmt"

	"github.com/potato-k3/potato-k3/replay"
)

// memoryFlags are the budgets a wave is planned against, shared by replay, bench and serve.
type memoryFlags struct {
	sliceTokens  int
	expertMajor  bool
	noPooling    bool
	device, host byteSize
	devices      deviceList // --devices (devices.go): goes to openEngine's backendTuning
}

// register adds --devices, --slice-tokens, --expert-major, --no-expert-pooling, --device-memory and --host-memory to fs.
func (m *memoryFlags) register(fs *flag.FlagSet) {
	fs.Var(&m.devices, "devices", devicesUsage)
	fs.IntVar(&m.sliceTokens, "slice-tokens", 0, "most tokens a layer computes at once; a layer's weights serve every slice (0: planned from --device-memory); results do not depend on it")
	fs.BoolVar(&m.expertMajor, "expert-major", false, "run MoE layers expert-major whenever layers run in slices: each chunk of routed experts serves every slice, the slices' expert inputs wait in host memory and pool into expert calls of many slices' rows (the plan does this on its own on a device too small for a layer's experts beside a slice); results do not depend on it")
	fs.BoolVar(&m.noPooling, "no-expert-pooling", false, "keep MoE layers slice by slice, one routed-expert call a slice, where the plan would pool every slice's rows into each chunk's call (a device that holds a layer's experts and the wave's expert inputs beside a slice; the state stays where the unpooled plan keeps it, on the device or in host memory); results do not depend on it")
	fs.Var(&m.device, "device-memory", "device memory a wave may plan for, e.g. 24GB (0 or unset: the device's free memory less 10%; on cpu, which computes in host memory, the host budget less the reads' buffers)")
	fs.Var(&m.host, "host-memory", "host memory a wave may plan for, e.g. 100GB (0 or unset: the available memory less 10%, within a container's or Slurm task's memory cgroup limit): the reads' own buffers, the per-token state kept off the device, then experts read ahead; only when the state does not fit are sequences split into waves that each read the weights again")
}

// apply sets the budgets in o.
func (m *memoryFlags) apply(o *replay.EngineOptions) {
	o.SliceTokens, o.DeviceMemory, o.HostMemory = m.sliceTokens, int64(m.device), int64(m.host)
	o.ExpertMajor, o.NoExpertPooling = m.expertMajor, m.noPooling
}

// check refuses, before anything is built, what the budgets' flags cannot mean: a negative
// --slice-tokens (it would silently plan as 0), and on the cpu backend a --devices ordinal other than 0
// (there is one CPU: an entry there is another CPU backend on it, named 0, as in 0,0; a 5 would be
// accepted and mean nothing).
func (m *memoryFlags) check(backend string) error {
	if m.sliceTokens < 0 {
		return fmt.Errorf("--slice-tokens %d is negative (0: planned from --device-memory)", m.sliceTokens)
	}
	if backend == "cpu" {
		for _, d := range m.devices {
			if d != 0 {
				return fmt.Errorf("--devices %s: the cpu backend has device 0 alone (name it several times, 0,0, for several CPU backends)", m.devices.String())
			}
		}
	}
	return nil
}
