package replay

// The memory budgets a wave is planned against: EngineOptions.DeviceMemory and HostMemory, else what the
// device and the host have free, less a margin.

import (
	"fmt"

	"github.com/potato-k3/potato-k3/internal/hostmem"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// memoryMargin is the share of free memory the default budgets leave alone.
const memoryMargin = 0.1

// deviceBudget is EngineOptions.DeviceMemory, else the backend's free device memory less a margin, else
// (a backend with no device: the CPU's) the host budget less what the reads hold in it (sharedMemory).
func (e *Engine) deviceBudget() int64 {
	if e.opts.DeviceMemory > 0 {
		return e.opts.DeviceMemory
	}
	if d, ok := e.Model.Ops.(ops.DeviceMemory); ok {
		if free, err := d.FreeDeviceMemory(); err == nil && free > 0 {
			// the globals and resident layers are uploaded already: they count as the budget's
			return int64(float64(free-e.planGlobals())*(1-memoryMargin)) + e.uploaded()
		}
	}
	shared := e.hostBudget() - e.hostReadBuffers()
	if e.opts.HostMemory <= 0 {
		shared += e.uploaded() // as above: the globals and resident layers already left the memory available
	}
	return max(0, shared)
}

// sharedMemory says that the device is the host's memory: a backend without ops.DeviceMemory (the CPU's)
// and no EngineOptions.DeviceMemory to act as a device of that size. Its activations and state then share
// the host budget with the reads: the plan counts the state kept apart (as bfloat16, in BF16 precision)
// and the running slice in one pool, never the same memory twice, and a wave whose state the pool cannot
// hold beside a slice splits into waves.
func (e *Engine) sharedMemory() bool {
	_, dev := e.Model.Ops.(ops.DeviceMemory)
	return !dev && e.opts.DeviceMemory <= 0
}

// hostBudget is EngineOptions.HostMemory, else the host's available memory less a margin (hostBudgetOf).
func (e *Engine) hostBudget() int64 {
	if e.opts.HostMemory > 0 {
		return e.opts.HostMemory
	}
	avail, _ := hostmem.Available() // hostmem.Assumed where the system does not say
	if e.hostAvail != nil {
		avail = e.hostAvail()
	}
	return e.hostBudgetOf(avail)
}

// hostBudgetSource says where the host budget comes from, for messages that name it.
func (e *Engine) hostBudgetSource() string {
	if e.opts.HostMemory > 0 {
		return "--host-memory"
	}
	return fmt.Sprintf("the host's available memory less %.0f%%; --host-memory sets it", 100*memoryMargin)
}

// hostBudgetOf is the host budget where the system has avail bytes available: less a margin, plus the
// buffers the engine keeps from wave to wave, those of the state (statebufs.go) and the read buffers and
// read-ahead slots of its pool (hostpool.go). The system counts them as used, but the next wave's state
// and reads take them again, or they are released before new ones are made: counted out, a warm engine
// planned a 1,048,576-token wave in two reads that a cold one ran in one (run 135: 30 GB of its own
// state buffers taken from a budget of 47).
func (e *Engine) hostBudgetOf(avail int64) int64 {
	if _, dev := e.Model.Ops.(ops.DeviceMemory); !dev {
		avail -= e.planGlobals() // a backend without device memory keeps the globals in host memory
	}
	return int64(float64(avail)*(1-memoryMargin)) + e.state.bytes() + e.pool.bytes()
}

// planGlobals is the checkpoint bytes of the globals that an engine opened with EngineOptions.PlanOnly
// did not load (0 for any other engine): the free memory its budgets are read from still holds their
// room, which an engine that runs waves has spent on them.
func (e *Engine) planGlobals() int64 {
	if !e.opts.PlanOnly {
		return 0
	}
	var n int64
	for _, s := range e.Plan.GlobalTensors() {
		n += s.Bytes()
	}
	return n
}
