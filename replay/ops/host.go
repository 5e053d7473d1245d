package ops

// HostMemory is an optional interface of a Backend: host memory that its Upload and UploadExpert copy from
// fastest. The CUDA backend hands out page-locked (pinned) memory, which the device's copy engine reads
// directly at the full host-to-device rate; from ordinary memory every byte first goes through a staging
// copy on the CPU. The engine reads weights from the checkpoint straight into such buffers when its
// backend implements HostMemory, and into ordinary Go memory otherwise.
//
// Contract: Upload and UploadExpert give bit for bit the same results (and the same errors) for bytes in
// this memory as for the same bytes anywhere else, and, as for any source, keep no reference to the bytes
// once they return: the caller may overwrite or free the buffer at once.
type HostMemory interface {
	// AllocHost returns n bytes of host memory (contents undefined) that stays valid until FreeHost or
	// the backend's Close. The slice must not be grown with append.
	AllocHost(n int) ([]byte, error)
	// FreeHost releases a buffer AllocHost returned (the same slice, or one with the same first byte).
	// Freeing anything else is an error; so is using the buffer afterwards.
	FreeHost(b []byte) error
}

// StableHostMemory is an optional interface of a Backend with HostMemory: a buffer may be declared
// immutable, so that uploads from it need not wait for their copy. The engine's host cache declares the
// buffers it keeps (they hold weights for the engine's lifetime); a device backend then queues an expert's
// copy from them and returns at once, and the copies of a whole layer's experts stream on the copy engine
// while the layer's attention still computes.
//
// Contract: after MarkStable(buf) the caller never writes buf again; it may still FreeHost it. Results
// are the same bits as from any other memory; errors in the bytes (an MXFP4 scale byte 255) are still
// reported by the upload that reads them.
type StableHostMemory interface {
	HostMemory
	// MarkStable declares buf (a buffer from AllocHost, whole) immutable until FreeHost.
	MarkStable(buf []byte) error
}

// ExpertParts are one routed expert's six MXFP4 tensors, as UploadExpert takes them.
type ExpertParts struct {
	ID                                                      int
	W1Packed, W1Scale, W3Packed, W3Scale, W2Packed, W2Scale []byte
}

// ExpertBatchUploader is an optional interface of a Backend: UploadExperts uploads several experts in one
// call, which a device backend turns into one round trip to its device thread instead of one an expert.
// Contract: the same experts, bits and errors as UploadExpert called for each in order; on an error none
// of the batch is left allocated.
type ExpertBatchUploader interface {
	UploadExperts(latent, ffn int, parts []ExpertParts) ([]Expert, error)
}

// BF16Transfer is an optional interface of a Backend: in BF16 precision an activation crosses to and from
// host memory as bfloat16 bits, two bytes a value, with no conversion on the host. The engine moves the
// per-token state of slices kept in host memory (replay/model/wave.go) and an expert-major layer's expert
// inputs this way; ToHost and FromHost carry four bytes a value and widen or narrow every one on the host.
//
// Contract, in BF16 precision (both methods refuse FP32 precision with an error): ToHostBF16(x, dst) writes
// the upper halves of ToHost(x)'s values (each is a bfloat16 value, as every activation of BF16 precision
// is), row-major; FromHostBF16(rows, cols, bits) equals FromHost(rows, cols, widened bits). ToHostBF16
// waits for the ops queued before it, as ToHost does.
type BF16Transfer interface {
	ToHostBF16(x Tensor, dst []uint16) error
	FromHostBF16(rows, cols int, src []uint16) (Tensor, error)
}

// QueuedBF16Transfer is an optional interface of a BF16Transfer backend with HostMemory: the same
// transfers between the device and its page-locked host memory, queued in order with the backend's ops
// instead of waited for, so that the host does not stand in the copy (the engine keeps the per-token
// state of slices in host memory, and an expert-major layer's stash, in such memory:
// replay/model/hostbufs.go). A backend may still wait for the ops queued before the transfer (the CUDA
// backend does, to hold its device memory to the plan).
//
// Contract: ToHostBF16Queued and FromHostBF16Queued give ToHostBF16's and FromHostBF16's results. When
// dst or src lies inside one buffer from AllocHost, the copy may complete after the call returns: it
// happens after every op queued before the call and before every op queued after it, and the caller
// neither reads dst nor writes src, nor frees the buffer, until Sync returns. A transfer queued or started
// (PrefetchBF16) after a ToHostBF16Queued reads what it wrote. ToHostBF16Queued's copy may hold 2 x rows
// x cols bytes of device memory besides x, which may be freed at once; they are given back by the time
// the next queued transfer or Sync returns (the engine's plan counts one slice's downloads on their
// way: replay/plan_bytes.go). Elsewhere they wait, as ToHostBF16 and FromHostBF16 do. Sync waits for
// every op and copy queued.
type QueuedBF16Transfer interface {
	BF16Transfer
	ToHostBF16Queued(x Tensor, dst []uint16) error
	FromHostBF16Queued(rows, cols int, src []uint16) (Tensor, error)
	Sync() error
}

// PrefetchBF16Transfer is an optional interface of a QueuedBF16Transfer backend: a transfer from its
// page-locked host memory split in two, so that the copy runs beside the ops queued between the halves.
// The engine starts the next slice's state on its way in before it queues this slice's layer
// (replay/model/wave.go): queued in order, each slice's state crossed the bus between two slices' work,
// 13% of an 80 GB card's MoE layer with the state in host memory (run 131).
//
// Contract: PrefetchBF16(rows, cols, src) returns at once, and the Prefetched's Take returns what
// FromHostBF16(rows, cols, src) would: ops queued after Take see the tensor, and ops queued between the
// two calls run beside the copy. Between them the backend holds 2 x rows x cols bytes of device memory
// (the plan counts it) and the caller neither writes src nor frees its buffer; after Take, ops queued
// later may write src (the copy comes first), the host itself only after Sync, as for the queued
// transfers. Drop gives up a transfer whose tensor is not wanted and returns once its copy has ended:
// src is the caller's again. Take or Drop, once, ends every Prefetched. Where src does not lie inside one
// buffer from AllocHost, PrefetchBF16 may make the tensor at once (FromHostBF16Queued), and Take
// returns it.
type PrefetchBF16Transfer interface {
	QueuedBF16Transfer
	PrefetchBF16(rows, cols int, src []uint16) (Prefetched, error)
}

// Prefetched is a transfer PrefetchBF16 started.
type Prefetched interface {
	Take() (Tensor, error)
	Drop() error
}
