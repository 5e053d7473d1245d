package ops

// OpProfiler is implemented by a backend that can time its ops on the device (the CUDA backend). It is
// optional, found by type assertion; a benchmark turns it on around the runs it measures and marks the
// ends of the spans it wants reported apart (a model's layers).
//
// An op's time is device time on the backend's compute stream, between an event recorded just before the
// op's work is queued and one recorded just after. It is not the time of the op's kernels alone: it
// includes every wait of the compute stream inside that interval, such as a wait on the copy stream (an
// ExpertsAccumulate waiting for its experts' uploads, which is itself worth knowing) or the gaps of an op
// that stages a host copy in pieces. Work an op queues on another stream (an asynchronous expert upload)
// is not counted. Ops run one after another on the compute stream, so their times do not overlap, and a
// span's summed op time below the wall time of the same span is time the compute stream stood idle (the
// device ran behind the host, or the host fed it too slowly).
type OpProfiler interface {
	// ProfileOps turns op timing on or off; turning it on clears what was recorded. Turning it off keeps
	// what was recorded for OpProfile.
	ProfileOps(on bool) error
	// ProfileMark ends the current span: the ops queued since the previous mark (or since
	// ProfileOps(true)) are reported under label. It does nothing while timing is off.
	ProfileMark(label string) error
	// OpProfile waits for the timed ops, returns the spans (in order) with each op's calls and device
	// seconds (sorted by time, largest first), and clears them. Ops after the last mark form a span "".
	OpProfile() ([]OpSpan, error)
}

// SpanProfiler is an optional interface of an OpProfiler: the device time of the spans between marks
// alone, with no timing of each op. Op timing costs two events and some host bookkeeping an op (about
// 1,100 ops a K3 layer at 262,144 tokens, a thousand of them frees that queue no work), which the spans
// it reports then carry; a benchmark that wants the timeline and not the ops asks for spans only.
type SpanProfiler interface {
	// ProfileSpans turns span timing on (clearing what was recorded) or off, as ProfileOps does, with no
	// op timed: ProfileMark ends spans as under ProfileOps, and OpProfile returns the spans with their
	// Device times and no Ops.
	ProfileSpans(on bool) error
}

// OpSpan is the ops of one span of an OpProfiler, between two marks.
type OpSpan struct {
	Label   string   // the label of the mark that ended the span ("" for the ops after the last mark)
	Ops     []OpTime // one entry per op key, largest Seconds first
	Seconds float64  // the sum of Ops' Seconds
	// Device is the span's length on the device timeline: from the point of the compute stream where the
	// previous span ended (or where timing was turned on) to where this one's mark was queued, idle time
	// included; 0 where the backend does not measure it (and for the span after the last mark). The device
	// runs behind the host, so this is a layer's own time where a host-side clock would blur it into its
	// neighbours'.
	Device float64
}

// UploadWait is the detail an OpProfiler gives the part of an op that waits for its inputs' uploads
// (an ExpertsAccumulate waiting for its experts' copies: "ExpertsAccumulate waiting for uploads"), so
// that a reader can tell the wait from the op's own work.
const UploadWait = "waiting for uploads"

// OpTime is the device time of one op key within a span.
type OpTime struct {
	// Op is the op's name, followed by a detail where the backend gives one (a MatMul's weight shape, the
	// path an ExpertsAccumulate took): "MatMul 12288x7168".
	Op      string
	Calls   int     // how many times it ran in the span
	Seconds float64 // summed device time of those calls (see OpProfiler)
	// IdleBefore is the summed device time the compute stream stood idle just before these calls: from
	// the end of the timed op queued before each (in any span) to its start. A large one names the op the
	// device waited for the host to queue, a host-side wait or planning inside the op before its work
	// (0 where the backend does not measure it).
	IdleBefore float64
	// Host is the summed host time of the calls: the backend's thread inside each op, planning and
	// queueing its work and waiting wherever the op waits for the device (0 where not measured).
	Host float64
	// HostGap is the summed host time before the calls outside any op: from the return of the timed op
	// before each to the call (the caller's own work between ops; 0 where not measured). Beside
	// IdleBefore it tells a device waiting for the caller from one waiting for an op that returned late.
	HostGap float64
	// MemHigh is the most device memory the backend had allocated during any of the calls, in bytes (0
	// where not measured): what was held before the call, its outputs and its temporaries.
	MemHigh int64
	// MemOwn is the most any one call added to what the backend had allocated when it began, in bytes (0
	// where not measured): its outputs and temporaries alone.
	MemOwn int64
}
