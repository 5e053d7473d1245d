package cuda

// FreeDeviceMemory is the device memory free now (ops.DeviceMemory): the engine plans its waves against
// it. Memory the backend's pool keeps for reuse counts as used, so the plan errs on the safe side.
func (b *Backend) FreeDeviceMemory() (int64, error) {
	free, _, err := b.MemInfo()
	return free, err
}

// ActivationElementBytes is the most device memory one activation value takes (ops.ActivationSizer): 4
// for its float32 value and 2 for the bfloat16 copy a norm or the first cuBLASLt matmul that reads it
// keeps (narrow.go).
func (b *Backend) ActivationElementBytes() int { return 6 }
