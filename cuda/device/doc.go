// Package device is the machinery a GPU backend runs on one device, on top of cuda/bind: the CUDA thread,
// the context and its streams, memory, host transfers, events and the kernels. It knows nothing of K3 or
// of the ops interface; the backend in package cuda is its one user.
//
//   - Thread runs closures one at a time on a goroutine locked to its OS thread, where the context is
//     current; a panic becomes an error wrapping ErrInternal, and a call after Close returns ErrClosed.
//   - Device (Open, on that thread) is the device's primary context with two streams: Stream runs every
//     kernel and the copies of op inputs and outputs, CopyStream the weight uploads beside them. Malloc and
//     Free are stream-ordered (cuMemAllocAsync from the device's pool, which keeps freed blocks);
//     MallocCopy orders an allocation on the copy stream.
//   - Host memory: page-locked buffers (AllocPinned), the pinned staging buffer (Staging, ToDevice,
//     ToHost, StageCopy, all CPUs copying at once: ParallelCopy) and direct copies from pinned memory on
//     the copy stream (CopyAsync, SyncCopy).
//   - The upload ring (UploadAsync): small inputs an op uploads as it runs go through device-mapped
//     pinned memory copied by a kernel on the compute stream, each region reused once the event behind
//     its copy has completed, so no op drains the stream and no small copy queues behind the weight
//     stream in the copy engine.
//   - Kept buffers (Kept): scratch that lives from call to call outside the pool; side streams
//     (SideStreams, WaitOn) with a scratch buffer each; EventPool, the events all of these reuse.
//   - Kernels: CompileAll compiles CUDA sources with NVRTC for an architecture through the disk cache
//     (CacheKey covers the source, headers, options, NVRTC version and image kind; CacheDir); Load loads
//     the images into the context and Func finds a kernel by name.
//
// Every Device method runs on the Thread with the context current; none is safe for concurrent use.
//
//	th, err := device.NewThread(func() error {
//		var err error
//		dv, err = device.Open(drv, cudev, true)
//		return err
//	})
//	...
//	err = th.Do(func() error {
//		p, err := dv.Malloc(1 << 20)
//		if err != nil {
//			return err
//		}
//		return dv.Free(p)
//	})
package device
