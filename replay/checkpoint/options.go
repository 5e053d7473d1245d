package checkpoint

import "runtime"

// Option configures Open.
type Option func(*options)

type options struct {
	direct  bool  // read tensor data with O_DIRECT (Linux), bypassing the page cache
	workers int   // positioned reads in flight per Dir
	segment int64 // bytes per positioned read
}

// DefaultSegmentSize is the size of the positioned reads a tensor is split into. 8 MiB is large enough
// that per-call overhead vanishes against NVMe bandwidth and small enough that a 1.2 GB embedding is read
// by many reads in parallel and that cancellation is noticed within one segment.
const DefaultSegmentSize = 8 << 20

func defaultOptions() options {
	// NVMe needs many requests in flight to reach its bandwidth; the reads block in the kernel, not on CPU.
	return options{workers: max(16, 4*runtime.GOMAXPROCS(0)), segment: DefaultSegmentSize}
}

// WithDirectIO makes reads bypass the page cache with O_DIRECT where the platform and file system allow
// it. Streaming 1.56 TB through the page cache only evicts useful pages and costs a copy; direct reads
// go straight to the device. Where O_DIRECT is refused (tmpfs on older kernels, non-Linux), reads fall
// back to buffered I/O, per shard, without an error.
func WithDirectIO(on bool) Option { return func(o *options) { o.direct = on } }

// WithReadConcurrency sets how many positioned reads a Dir keeps in flight at most, across all callers
// (default max(16, 4*GOMAXPROCS)). Values below 1 keep the default.
func WithReadConcurrency(n int) Option {
	return func(o *options) {
		if n >= 1 {
			o.workers = n
		}
	}
}

// WithSegmentSize sets the size of one positioned read (default DefaultSegmentSize). It is rounded up to
// a multiple of DirectAlignment so that segment boundaries stay aligned for O_DIRECT. Values below 1
// keep the default.
func WithSegmentSize(n int64) Option {
	return func(o *options) {
		if n >= 1 {
			o.segment = (n + DirectAlignment - 1) &^ (DirectAlignment - 1)
		}
	}
}
