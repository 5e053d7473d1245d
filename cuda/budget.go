package cuda

// FreeDeviceMemory is the device memory free now (ops.DeviceMemory): the engine plans its waves against
// it. Memory the backend's pool keeps for reuse counts as used, so the plan errs on the safe side.
func (b *Backend) FreeDeviceMemory() (int64, error) {
	free, _, err := b.MemInfo()
	return free, err
}

// ActivationElementBytes is the device memory one activation value takes on average at a sublayer's peak
// (ops.ActivationSizer): 4 for its float32 value, and 1 for the bfloat16 copies that norms and the first
// cuBLASLt matmul reading an input keep (narrow.go): only matmul inputs have one, about half the values.
func (b *Backend) ActivationElementBytes() int { return 5 }

// ExpertScratchBytes is what ExpertsAccumulate takes beyond acc and z (ops.ExpertScratch): the grouped
// path's bfloat16 gathers of every (row, expert) pair's latent input and SiTU output (experts.go,
// prepareGrouped); the cuBLASLt lanes hold buffers of a bounded number of rows, counted by the plan's
// margin.
func (b *Backend) ExpertScratchBytes(rows, k, latent, ffn int) int64 {
	return 2 * int64(rows) * int64(k) * int64(latent+ffn)
}
