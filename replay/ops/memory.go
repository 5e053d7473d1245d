package ops

// DeviceMemory is an optional interface of a Backend with memory of its own (the CUDA backend): the
// engine plans its waves against what is free.
type DeviceMemory interface {
	// FreeDeviceMemory is the device memory free now, in bytes.
	FreeDeviceMemory() (int64, error)
}

// ActivationSizer is an optional interface of a Backend: the most device bytes one activation value takes
// (the CUDA backend keeps a bfloat16 copy beside the float32 value of an activation a matmul reads). The
// engine plans 4 bytes a value for a backend without it.
type ActivationSizer interface {
	ActivationElementBytes() int
}

// ExpertScratch is an optional interface of a Backend: the device bytes ExpertsAccumulate takes beyond
// its acc and z for a call over rows rows of z whose routing gives the call's experts pairs (row, expert)
// pairs (the CUDA backend's grouped path gathers every pair's latent input and SiTU output in bfloat16,
// and keeps a bfloat16 copy of z). The engine plans 4 x pairs x (latent + 2 ffn) bytes for a backend
// without it: float32 gate and up outputs and the expert output of every pair, as the CPU backend holds
// them.
type ExpertScratch interface {
	ExpertScratchBytes(rows, pairs, latent, ffn int) int64
}
