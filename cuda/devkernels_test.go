package cuda

// The tests compile and load the kernel files' dev kernels (kernels.go, kernelFile.dev): the timing
// forms and alternates they compare and time the production kernels against.
func init() { devKernels = true }
