package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// ErrPlanOnly is Run's error on an engine opened with EngineOptions.PlanOnly, which holds no globals.
var ErrPlanOnly = errors.New("replay: the engine was opened to plan waves only (EngineOptions.PlanOnly, --plan-only): it holds no embedding or lm_head to run them")

// Engine replays token sequences through one model on one backend. Its methods are not safe for
// concurrent use: the Queue serialises waves onto it.
type Engine struct {
	Plan    *model.Plan
	Model   *model.Model
	reader  Reader
	globals *model.Globals
	opts    EngineOptions
	held    atomic.Int64    // host bytes of weights read and not yet uploaded (layers read ahead, expert batches)
	pool    *hostPool       // the host buffers weights are read into, reused across layers and waves
	cache   *hostCache      // weights kept in host memory across waves (EngineOptions.HostCacheBytes); nil: none
	kept    *residentLayers // layers' own weights kept on the backend (EngineOptions.ResidentBytes); nil: none
	// fitTokens, when not 0, bounds the engine's waves below one that ran out of device memory.
	fitTokens int
	plan      WavePlan // of the wave running
	// maxRows bounds the rows of one slice (or of an unsliced wave) by what the backend can index
	// (ops.ElementLimit; 0: no bound)
	maxRows int
	// forceExpertMajor plans every sliced wave with MoE layers expert-major, budgets or not (tests)
	forceExpertMajor bool
	// wholeCalls plans every expert call for all top-k pairs of a row, so that no call is cut (tests:
	// model.Pass.CallPairs against one call a chunk)
	wholeCalls bool
	// hostAvail stands for the system's available host memory where set (tests)
	hostAvail func() int64
	// forceHostStash keeps expert-major stashes in host memory where the device has room for them (tests)
	forceHostStash bool
	// noFold runs a FoldMajor plan's last phases in sweeps of their own, as unfolded (tests: the A/B of
	// the fold on one plan)
	noFold bool
	group  *deviceGroup // the devices of EngineOptions.Devices (devices.go); nil: this one alone
	feed   *deviceFeed  // while a wave runs over devices: where this device's weights come from (feed.go)
	slab   aheadSlab    // the host buffers experts are read ahead of their routers into (readahead.go)
	state  *stateBufs   // the host buffers of state kept off the device and of stashes (statebufs.go)
	// aheadBatch, when not 0, replaces expertBatch as the experts a read-ahead buffer holds (for tests)
	aheadBatch int
	// ConfigSHA256 is the hex SHA-256 of the model directory's config.json (empty for engines made with
	// NewEngine): results carry it so that a cache or a reader can tell models apart.
	ConfigSHA256 string
	// WeightsSHA256 is the checkpoint's fingerprint (checkpoint.Dir.Fingerprint: its tensor tables and a
	// sample of its data; empty for engines made with NewEngine): results carry it beside ConfigSHA256,
	// which two checkpoints of one architecture share.
	WeightsSHA256 string
}

// Version is the engine's version, recorded with every result.
const Version = "0.1.0"

// EngineOptions tune the engine without changing any result.
type EngineOptions struct {
	// ExpertChunk is how many routed experts of a layer are resident at once (0: all chosen at once, or,
	// when a layer's experts do not fit the device beside a slice, the largest chunk the plan fits:
	// WavePlan.ExpertChunk).
	ExpertChunk int
	// ExpertMajor runs MoE layers expert-major (WavePlan.ExpertMajor) whenever the layers run in slices,
	// even where a layer's experts fit the device beside a slice: each chunk of experts serves every
	// slice, and the slices pool into expert calls of many slices' rows, for the price of the expert
	// inputs' trips to host memory. The plan chooses it on its own only where the experts do not fit.
	ExpertMajor bool
	// NoExpertPooling keeps MoE layers slice by slice where the plan would pool their expert calls
	// (WavePlan.Pooled): the A/B of pooling. Results do not depend on it.
	NoExpertPooling bool
	// MaxWaveTokens bounds the tokens of one wave (0: no bound but the memory budgets, which the wave
	// plan applies): larger requests run as several waves, each reading the weights again. Results do not
	// depend on it.
	MaxWaveTokens int
	// HostCacheBytes is how much host memory may keep the layers' weights (their own tensors and routed
	// experts) between waves, so that later waves read them from memory instead of the checkpoint (0: none;
	// the engine then holds only a few layers' read buffers). On the CUDA backend it is page-locked memory,
	// which the GPU copies from at its full host-to-device rate. The first layers read fill it and stay.
	HostCacheBytes int64
	// ResidentBytes is how many checkpoint bytes of the layers' own weights (all but the routed experts)
	// may stay uploaded on the backend between waves (0: none, every layer is uploaded each wave). A layer
	// kept is neither read nor uploaded again; the first layers uploaded stay. On the CUDA backend this is
	// device memory, taken from what the activations and experts of a wave can use.
	ResidentBytes int64
	// PrefetchExperts is how many routed experts of an MoE layer (the first ids, in the order the chunks
	// are fetched) are uploaded from the host cache before the layer's router runs, when the wave is
	// large enough that nearly every expert is chosen (tokens x top-k >= 4 x experts): on the CUDA backend
	// their copies then overlap the layer's attention. 0: none; negative: all of a layer's experts. Results
	// do not depend on it.
	PrefetchExperts int
	// ExpertReadAhead is how much host memory may hold routed experts read from the checkpoint before
	// their layer's router runs, in waves large enough that nearly every expert is chosen (tokens x top-k
	// >= 4 x experts): a MoE layer's experts are then read, in ascending id order, as soon as its own
	// weights are (while the layer before computes), and uploaded from those buffers once chosen; those no
	// token chose are freed at the layer's end. 0: one MoE layer's experts, within the host budget
	// (HostMemory) less the state kept in host memory, the host cache and the other read buffers; negative:
	// off (experts are read only once chosen). The plan line says when it is on. Results do not depend
	// on it.
	ExpertReadAhead int64
	// PlanOnly opens the engine for PlanWave alone: the globals (the embedding and lm_head, the largest
	// tensors of the checkpoint) are neither read nor uploaded, so that planning a wave on a full-size
	// model takes a moment and no memory. The budgets are the ones an engine with the globals uploaded
	// would have (planGlobals). Run refuses with ErrPlanOnly.
	PlanOnly bool
	// SliceTokens is the most tokens a layer computes at once (0: planned from the device budget): a
	// layer's weights are uploaded once per wave and serve every slice. Results do not depend on it.
	SliceTokens int
	// DeviceMemory is the device memory a wave may plan for (0: the backend's free memory less 10%; for a
	// backend without device memory, which computes in host memory, HostMemory's budget less the reads'
	// buffers, and no state kept apart in host memory), so that the engine behaves as on a smaller card.
	DeviceMemory int64
	// HostMemory is the host memory a wave may plan for (0: the available memory less 10%): the per-token
	// state when it lives off the device, beside the reads' own buffers (two layers' weights, the experts
	// read after a router, the host cache's room), and then the experts read ahead of their routers. Only
	// when it cannot hold a wave's state are the sequences split into waves, each reading the weights again.
	HostMemory int64
	// Devices are the backends of further devices (one each, every one with its own context and OS thread
	// on CUDA) that share the engine's weight stream: each wave's sequences are spread over the engine's
	// backend and these by tokens, each layer and each chosen expert is read once into host memory and
	// uploaded to every device from there, and each device runs its share (its own slices, state and
	// carries, planned against DeviceMemory, and HostMemory divided among the devices). Results are the
	// bits of one device. HostCacheBytes is one cache for all the devices; the other options apply to each.
	// The engine closes the devices' engines; the caller closes the backends after it. (devices.go, feed.go)
	Devices []ops.Backend
	// Progress, when set, is called after every layer of a wave.
	Progress func(Progress)
	// Log, when set, receives the plan of every wave before its first layer, and warnings.
	Log func(string)
}

// NewEngine binds a plan and a tensor reader to a backend and uploads the global weights.
func NewEngine(ctx context.Context, plan *model.Plan, r Reader, b ops.Backend, opts EngineOptions) (*Engine, error) {
	m := model.New(plan, b)
	e := &Engine{Plan: plan, Model: m, reader: r, opts: opts, pool: newHostPool(b), cache: newHostCache(opts.HostCacheBytes),
		kept: newResidentLayers(opts.ResidentBytes), state: newStateBufs(b)}
	if l, ok := b.(ops.ElementLimit); ok { // keep every activation within what the backend can index
		e.maxRows = int(min(l.MaxElements()/int64(plan.WidestActivation()), 1<<40))
	}
	if opts.PlanOnly {
		return e, e.openDevices(ctx, nil)
	}
	src := readAhead(ctx, r, plan.GlobalTensors(), e.pool, &e.held, nil, -1)
	g, err := m.LoadGlobals(ctx, src)
	if err == nil {
		if err = e.openDevices(ctx, src); err != nil { // the other devices' globals, from the same bytes
			freeGlobals(m, g)
		}
	}
	src.release(e.pool, &e.held, nil)
	// The globals (the embedding and lm_head) are read once and are larger than any layer: keep no
	// buffer of their size.
	if terr := e.pool.trim(); err == nil && terr != nil {
		err = fmt.Errorf("releasing host buffers: %w", terr)
	}
	if err != nil {
		return nil, err
	}
	e.globals = g
	return e, nil
}

// Open opens a model directory (config.json and the safetensors checkpoint, validated against the plan
// before anything is read) and makes an engine on backend b.
func Open(ctx context.Context, dir string, b ops.Backend, opts EngineOptions, ckpt ...checkpoint.Option) (*Engine, *checkpoint.Dir, error) {
	plan, err := model.ReadFile(dir)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(cfg)
	d, err := checkpoint.Open(dir, ckpt...)
	if err != nil {
		return nil, nil, err
	}
	if err := plan.Fit(d.Lookup); err != nil {
		d.Close()
		return nil, nil, err
	}
	if err := plan.CheckDir(d); err != nil { // by count first: an absurd config is refused before its tensor list is built
		d.Close()
		return nil, nil, err
	}
	weights, err := d.Fingerprint(ctx)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	e, err := NewEngine(ctx, plan, d, b, opts)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	e.ConfigSHA256, e.WeightsSHA256 = hex.EncodeToString(sum[:]), weights
	return e, d, nil
}

// Close frees the resident weights, the host cache and the host buffers.
func (e *Engine) Close() {
	e.group.closeOthers()
	e.kept.free(e.Model)
	// A backend that fails to free host memory releases it when it closes.
	e.slab.fit(e.pool, 0, 0)
	e.state.close()
	_ = e.cache.clear(e.pool)
	_ = e.pool.trim()
	if e.globals != nil {
		for _, t := range []ops.Tensor{e.globals.Embed, e.globals.Norm, e.globals.OutputMix, e.globals.LMHead} {
			e.Model.Ops.Free(t)
		}
		e.globals = nil
	}
}

// SetProgress replaces the progress callback (nil: none). Not safe while a wave runs.
func (e *Engine) SetProgress(f func(Progress)) { e.opts.Progress = f }

// HeldBytes is the host memory currently holding weights read and not yet uploaded: layers read ahead
// and batches of experts (for tests of the two-layer bound).
func (e *Engine) HeldBytes() int64 { return e.held.Load() + e.group.heldBytes() }

// HostBufferBytes is the host memory of the engine's read buffers, in use or kept for the next layer or
// wave (page-locked memory on a backend with ops.HostMemory). It is at most a few layers' worth: two
// layers' own weights, a few batches of experts, and the buffers of experts read ahead of their routers
// (EngineOptions.ExpertReadAhead, one MoE layer's experts at most by default).
func (e *Engine) HostBufferBytes() int64 { return e.pool.bytes() }

// ResidentBytes is the checkpoint bytes of the layers whose own weights stay on the backend between waves
// (EngineOptions.ResidentBytes).
func (e *Engine) ResidentBytes() int64 { return e.kept.bytes() }

// HostCacheBytes is the host memory the host cache holds (EngineOptions.HostCacheBytes), not counted in
// HostBufferBytes.
func (e *Engine) HostCacheBytes() int64 { return e.cache.bytes() }

// Progress reports a wave's advance after each layer.
type Progress struct {
	Layer, Layers int   // layers done, of all
	Tokens        int   // tokens in the wave
	BytesRead     int64 // weight bytes read so far in this wave
	Seconds       float64
	// ETASeconds is naive: the remaining layers and the final readout (counted as one more layer) at the
	// mean time per layer so far, so that it says more than 0 s while the readout runs.
	ETASeconds float64
	// RoutedSeconds is how long after the layer started its router returned (0 in a dense layer, and in a
	// wave run in slices, whose routers run once a slice): on a
	// device backend the router's result is the first wait for the device, so this is the time of the
	// layer's upload, attention and router, before any routed expert could be fetched.
	RoutedSeconds float64
	// Plan is the plan line of the wave (WavePlan.String).
	Plan string
}
