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
// its acc and z for rows rows choosing k experts each (the CUDA backend's grouped path gathers every
// (row, expert) pair's latent input and SiTU output in bfloat16). The engine plans
// 4 x rows x k x (latent + 2 ffn) bytes for a backend without it: float32 gate and up outputs and the
// expert output of every pair, as the CPU backend holds them.
type ExpertScratch interface {
	ExpertScratchBytes(rows, k, latent, ffn int) int64
}
