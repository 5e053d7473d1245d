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
