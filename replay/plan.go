package replay

import (
	"fmt"
	"strings"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// WavePlan is how the engine runs a set of sequences, decided before the first layer from the memory
// budgets and the model: how many weight reads (waves), how many slices each layer runs in, where the
// per-token state lives, and the device and host memory that takes. The engine never finds a limit by
// running out of memory: a plan that does not fit is refused before any compute, with the budget named.
type WavePlan struct {
	Tokens, Sequences, Longest int
	// Waves is the number of weight reads the sequences take: 1 unless the host cannot hold the state of
	// all of them (or MaxWaveTokens bounds the wave).
	Waves      int
	WaveTokens int // the most tokens of one wave
	// SliceTokens is the most rows a layer computes at once; Slices the number of slices of the largest
	// wave. A backend without ops.Slicer runs each wave in one slice.
	SliceTokens, Slices int
	Sliceable           bool
	// HostState: the state of slices DeviceSlices.. lives in host memory between layers, streamed slice by
	// slice; the first DeviceSlices keep theirs on the device.
	HostState    bool
	DeviceSlices int
	StateBytes   int64 // the per-token state of the largest wave
	// DevicePeak is the planned device memory of the largest wave: weights (WeightBytes), one slice's
	// activations, the carries, and the state when it stays on the device.
	DevicePeak, WeightBytes int64
	HostBytes               int64 // host memory of the state (0 when it stays on the device)
	DeviceBudget            int64
	HostBudget              int64
	// ExpertMajor: layers run in slices and MoE layers expert chunk by expert chunk over every slice
	// (model.Pass.ExpertMajor), for a device that cannot hold a layer's experts beside a slice. The
	// slices' expert inputs and shared outputs wait in host memory (StashBytes), their accumulators on
	// the device.
	ExpertMajor bool
	StashBytes  int64
	// StashOnDevice: expert-major, the slices' expert inputs and shared outputs stay on the device
	// (model.Pass.StashOnDevice), counted with the carries, instead of host memory.
	StashOnDevice bool
	// Pooled: expert-major on a device that holds a layer's experts beside a slice, for the expert calls
	// over every slice's rows (plan_pool.go): the layer's experts are held and fetched ahead of its router
	// as a sliced layer's are (model.Pass.PrefetchMajor), the expert inputs kept on the device.
	Pooled bool
	// FoldMajor: pooled with the state in host memory, each expert-major layer's last phase runs in the
	// next sweep over the wave (model.Pass.FoldMajor), so that the running sums cross once a layer; the
	// layer's routed_expert_norm and routed_expert_up_proj stay on the device until then (WeightBytes).
	FoldMajor bool
	// ExpertPool is the device memory an expert-major layer's expert call may take for its rows and the
	// backend's scratch: a slice's activations, which that phase does not hold. Consecutive slices whose
	// call fits share one call (model.Pass.PoolBytes).
	ExpertPool int64
	// ExpertChunk is how many routed experts of an MoE layer the wave holds on the device at once
	// (EngineOptions.ExpertChunk, or, when that is 0 and a layer's experts do not fit beside a slice, the
	// chunk the plan chose; 0: all chosen at once).
	ExpertChunk int
	// CallPairs is the most (row, expert) pairs a row brings to one ExpertsAccumulate call, as the plan
	// counts the calls' scratch (model.Model.CallPairs): a chunk whose experts bring more is accumulated
	// in several calls (model.Pass.CallPairs). 0: no MoE layers.
	CallPairs int
	// ExpertReadAhead is the host memory routed experts may take while read from the checkpoint ahead
	// of their routers (EngineOptions.ExpertReadAhead; 0: not read ahead, the wave being too small to
	// choose nearly every expert, or the host budget too small).
	ExpertReadAhead int64
	readAheadOff    string // why a wave large enough for the read-ahead goes without it
	wavesWhy        string // what cut the sequences into several waves, for the plan line
	Note            string // why the plan is not the usual one, if it is not
}

// String is the plan line that replay, bench and the service print before the first layer.
func (p WavePlan) String() string {
	reads := "1 read"
	if p.Waves > 1 {
		reads = fmt.Sprintf("%d reads (waves of at most %s tokens", p.Waves, numtext.Commas(p.WaveTokens))
		if p.wavesWhy != "" {
			reads += ": " + p.wavesWhy
		}
		reads += ")"
	}
	slices := "1 slice"
	if p.Slices > 1 {
		slices = fmt.Sprintf("%d slices of %s", p.Slices, numtext.Commas(p.SliceTokens))
	}
	where := "on the device"
	if p.HostState {
		where = fmt.Sprintf("in host memory (%s)", numtext.Bytes(p.HostBytes))
		if p.DeviceSlices > 0 {
			where += fmt.Sprintf(" and on the device (%s)", numtext.Count(p.DeviceSlices, "slice"))
		}
	}
	s := fmt.Sprintf("wave %s (%s, longest %s) in %s: %s; state %s %s; device peak %s of %s (weights %s)",
		numtext.Count(p.Tokens, "token"), numtext.Count(p.Sequences, "sequence"), numtext.Commas(p.Longest), reads, slices, numtext.Bytes(p.StateBytes), where, numtext.Bytes(p.DevicePeak),
		numtext.Bytes(p.DeviceBudget), numtext.Bytes(p.WeightBytes))
	if p.ExpertReadAhead > 0 {
		s += fmt.Sprintf("; experts read ahead from disk (up to %s of host memory)", numtext.Bytes(p.ExpertReadAhead))
	} else if p.readAheadOff != "" {
		s += "; " + p.readAheadOff
	}
	if p.Note != "" {
		s += "; " + p.Note
	} else if !p.Sliceable {
		s += "; this backend does not slice layers"
	}
	return s
}

// ErrBudget marks a request that the memory budgets cannot hold.
var ErrBudget = fmt.Errorf("replay: over the memory budget")

// minSlice is the smallest slice the planner picks on its own: below it a layer's weights are read by the
// device more times than its activations are worth. A budget that leaves less is refused.
const minSlice = 64

// PlanWave plans sequences of the given lengths, as Run would before any compute: a request the budgets
// cannot hold is an error naming the budget (ErrBudget).
func (e *Engine) PlanWave(lens []int) (WavePlan, error) {
	if e.group != nil { // over several devices (devices.go)
		return e.group.plan(lens)
	}
	return e.planWave(lens)
}

// planWave plans sequences of the given lengths on e's backend and budgets.
func (e *Engine) planWave(lens []int) (WavePlan, error) {
	p, err := e.planSlicing(lens)
	if err == nil {
		p.ExpertReadAhead, p.readAheadOff = e.readAheadBudget(p)
	}
	return p, err
}

// planSlicing plans lens with layers in slices when the backend slices, else (or when the experts of a
// layer do not fit the device at once) whole.
func (e *Engine) planSlicing(lens []int) (WavePlan, error) {
	_, sliceable := e.Model.Ops.(ops.Slicer)
	if !sliceable {
		return e.planWith(lens, modeWhole, e.opts.ExpertChunk)
	}
	p, err := e.planWith(lens, modeSliced, e.opts.ExpertChunk)
	if e.forceExpertMajor || e.opts.ExpertMajor {
		err = fmt.Errorf("%w: expert-major forced", ErrBudget)
	}
	if err == nil {
		if q, ok := e.planPooled(lens, p); ok {
			return q, nil
		}
	}
	// Sliced, a layer's experts serve every slice, so all of them are on the device at once. On a card
	// they nearly fill (K3's 22.8 GB of a layer's experts on 24 GB) that leaves slices of a few hundred
	// tokens, each calling nearly every expert: the experts' weights read from device memory once a slice,
	// some 14 TB a MoE layer at 262,144 tokens (the planning audit). Such a starved plan gives way to a
	// chunked one of larger slices in as few reads, below.
	starved := err == nil && e.Plan.MoELayers() > 0 && e.opts.SliceTokens == 0 &&
		p.Slices > 1 && p.SliceTokens < min(starvedSlice, p.WaveTokens)
	if (err == nil && !starved) || e.Plan.MoELayers() == 0 {
		return p, err
	}
	starvedAt := 0
	if starved {
		starvedAt = p.SliceTokens
	}
	// When they do not fit (a small card): layers unsliced with the experts in chunks if the wave fits so
	// (no extra traffic), else MoE layers expert-major, each chunk serving every slice. With --expert-chunk
	// 0 the plan takes the largest chunk, halving from half the experts, that fits.
	chunks, chosen := []int{e.opts.ExpertChunk}, false
	if e.opts.ExpertChunk <= 0 {
		chunks, chosen = autoChunks(e.Plan.Config.NumExperts), true
	}
	var qerr error
	var ok []WavePlan // the chunks' plans, largest chunk first
	for _, chunk := range chunks {
		q, err := e.planChunked(lens, chunk, starvedAt)
		if err != nil {
			qerr = err
			continue
		}
		if !chosen { // --expert-chunk given: its plan
			ok = append(ok, q)
			break
		}
		q.Note += fmt.Sprintf(" (the chunk of %d chosen by the plan: --expert-chunk 0)", chunk)
		ok = append(ok, q)
	}
	if len(ok) == 0 {
		if starved {
			return p, nil
		}
		// qerr says "over the memory budget" too: once is enough
		return p, fmt.Errorf("%w; nor with MoE layers expert-major: %s", err, strings.TrimPrefix(qerr.Error(), ErrBudget.Error()+": "))
	}
	q := pickChunk(ok)
	if starved && (q.Waves > p.Waves || (q.Slices > 1 && q.SliceTokens < min(starvedSlice, q.WaveTokens))) {
		return p, nil // the chunked plan starves too, or takes more reads: it costs more than it saves
	}
	return q, nil
}

// layerMode is how a plan runs the layers. From modeMajor on each mode is the one before with more.
type layerMode int

const (
	modeWhole       layerMode = iota // over the whole wave at once, the experts in chunks
	modeSliced                       // in slices, each MoE layer's experts held for all its slices
	modeMajor                        // in slices, MoE layers expert chunk by expert chunk (WavePlan.ExpertMajor)
	modeMajorDevice                  // modeMajor with the expert inputs and shared outputs on the device
	modePooled                       // modeMajorDevice with every expert of a layer held (WavePlan.Pooled)
	modePooledFold                   // modePooled with each layer's last phase in the next sweep (WavePlan.FoldMajor)
)

// planWith plans lens with the layers run as mode says and chunk routed experts at once (0: all chosen).
// Where the backend bounds its FFNs' scratch (ffnScratch) both counts of it are upper bounds: a row's
// intermediates, or one block of rows once a slice (larger where slices are small: a 24 GB card's
// 10,240-token slices against K3's 1.4 GB block of the dense FFN); the plan is the better of the two.
func (e *Engine) planWith(lens []int, mode layerMode, chunk int) (WavePlan, error) {
	p, err := e.planWithFFN(lens, mode, chunk, -1)
	scratch, ok := e.ffnScratch()
	if !ok {
		return p, err
	}
	q, qerr := e.planWithFFN(lens, mode, chunk, scratch)
	switch {
	case qerr != nil:
		return p, err
	case err != nil || betterPlan(q, p):
		return q, nil
	}
	return p, nil
}

// betterPlan says whether plan q does better than p: fewer reads of the weights, then larger slices,
// then the state on the device, then a smaller device peak.
func betterPlan(q, p WavePlan) bool {
	switch {
	case q.Waves != p.Waves:
		return q.Waves < p.Waves
	case q.SliceTokens != p.SliceTokens:
		return q.SliceTokens > p.SliceTokens
	case q.HostState != p.HostState:
		return !q.HostState
	}
	return q.DevicePeak < p.DevicePeak
}

// planWithFFN is planWith with the FFNs' scratch counted a row (ffnScratch < 0) or, ffnScratch bytes
// (ffnScratch's bound), once a slice.
func (e *Engine) planWithFFN(lens []int, mode layerMode, chunk int, ffnScratch int64) (WavePlan, error) {
	p := WavePlan{Sequences: len(lens), DeviceBudget: e.deviceBudget(), HostBudget: e.hostBudget(),
		Sliceable: mode != modeWhole, ExpertMajor: mode >= modeMajor, StashOnDevice: mode >= modeMajorDevice,
		Pooled: mode >= modePooled, FoldMajor: mode == modePooledFold, ExpertChunk: chunk, CallPairs: e.callPairs()}
	for _, n := range lens {
		p.Tokens += n
		p.Longest = max(p.Longest, n)
	}
	// The state's share of the host budget: what the wave's reads hold besides it is not the state's
	// (it used to be, so a plan could fill the budget with state and then hold gigabytes of read buffers
	// beyond it).
	reserve := min(e.hostReadBuffers(), p.HostBudget)
	stateBudget := p.HostBudget - reserve
	act, state, hostState := e.tokenBytesFFN(ffnScratch >= 0)
	carry := e.carryBytes(p.Longest, p.Sliceable)
	if ffnScratch >= 0 { // the FFNs' row blocks, counted once a slice where act leaves them out
		carry += ffnScratch
	}
	if _, perRow, ok := e.prefixBytes(p.Longest); ok && p.Sliceable {
		act += perRow // a slice's rows joined after a carried prefix's keys, and the state between its parts
	}
	callAct := act // what an expert-major layer's expert calls may take a token (no download on its way then)
	stashOut, stateOut := e.downloadBytes(p)
	act += stashOut // the last slice's stash on its way to host memory
	// a slice's activations where the state lives in host memory: with the next slice's state on its way
	// in beside them (model/state_prefetch.go) and the last slice's on its way out
	actH := act + e.prefetchBytes(hostState) + stateOut
	if p.ExpertMajor {
		// every slice's float32 expert accumulator on the device through the layer's chunks; its expert
		// inputs and shared outputs in host memory, bfloat16 values (float32 in FP32 precision)
		wave := p.Tokens
		if e.opts.MaxWaveTokens > 0 {
			wave = min(wave, max(e.opts.MaxWaveTokens, p.Longest))
		}
		d := e.Model.Dims
		carry += 4 * int64(d.Latent) * int64(wave)
		if p.StashOnDevice { // as activations, slice by slice
			carry += e.Model.ActivationBytes() * int64(d.Latent+d.Hidden) * int64(wave)
		} else {
			p.StashBytes = hostState / e.Plan.StateValuesPerToken() * int64(d.Latent+d.Hidden) * int64(wave)
		}
		if p.StashBytes > stateBudget {
			return p, fmt.Errorf("%w: the expert inputs of %s tokens (%s) do not fit the host budget of %s (%s) beside %s of read buffers",
				ErrBudget, numtext.Commas(wave), numtext.Bytes(p.StashBytes), numtext.Bytes(p.HostBudget), e.hostBudgetSource(), numtext.Bytes(reserve))
		}
		stateBudget -= p.StashBytes
	}
	p.WeightBytes = e.weightPeakChunk(mode == modeSliced || p.Pooled, chunk)
	if p.FoldMajor { // a folded layer's norm and up projection stay into the next layer
		p.WeightBytes += e.tailBytes()
	}
	avail := p.DeviceBudget - p.WeightBytes - carry
	stash := "" // what else the device budget holds, for messages
	if e.sharedMemory() {
		// the device budget is the rest of the host's (deviceBudget): the expert inputs kept in host memory
		// come out of it, and the state kept apart has no budget of its own (the pool below shares the
		// device budget with it in BF16 precision)
		avail -= p.StashBytes
		stateBudget = 0
		if p.StashBytes > 0 {
			stash = fmt.Sprintf(" and %s of expert inputs", numtext.Bytes(p.StashBytes))
		}
	}
	least := int64(min(minSlice, max(p.Tokens, 1))) // a wave smaller than a slice needs only its own
	if e.opts.SliceTokens > 0 {
		least = min(least, int64(e.opts.SliceTokens))
	}
	if avail < least*act {
		// what would help: the budget that holds it, and only the levers that shrink what is too large
		hint := fmt.Sprintf("it needs at least %s (--device-memory)", numtext.Bytes(p.DeviceBudget-avail+least*act))
		if e.Plan.MoELayers() > 0 {
			hint += ", or fewer experts at once (--expert-chunk)"
		}
		if carry > p.WeightBytes {
			hint += fmt.Sprintf("; the carries are what a sequence of %s tokens holds across slices (its MLA's earlier keys and values): a shorter one holds less",
				numtext.Commas(p.Longest))
		}
		return p, fmt.Errorf("%w: the device budget of %s leaves %s after %s of weights and %s of carries%s, "+
			"less than a slice of %d tokens needs (%s): %s",
			ErrBudget, numtext.Bytes(p.DeviceBudget), numtext.Bytes(max(avail, 0)), numtext.Bytes(p.WeightBytes), numtext.Bytes(carry), stash, least, numtext.Bytes(least*act), hint)
	}
	wave := p.Tokens
	if e.opts.MaxWaveTokens > 0 && e.opts.MaxWaveTokens < wave {
		wave = max(e.opts.MaxWaveTokens, p.Longest)
		p.wavesWhy = "the most a wave takes (--max-wave-tokens)"
	}
	slice := e.opts.SliceTokens
	switch {
	case !p.Sliceable:
		// one slice: a wave holds its state and activations on the device at once
		if fit := int(avail / (act + state)); fit < wave {
			wave = fit
			p.wavesWhy = "what the device budget holds with layers unsliced"
		}
		if e.maxRows > 0 && e.maxRows < p.Longest {
			return p, fmt.Errorf("%w: a sequence of %s tokens is more than the %s rows the %s backend can index at once "+
				"(ops.ElementLimit), and its layers run unsliced", ErrBudget, numtext.Commas(p.Longest), numtext.Commas(e.maxRows), e.Model.Ops.Name())
		}
		if e.maxRows > 0 && wave > e.maxRows {
			wave = e.maxRows // what the backend can index (ops.ElementLimit)
			p.wavesWhy = "the most rows the backend indexes at once"
		}
		if wave < p.Longest {
			return p, fmt.Errorf("%w: a sequence of %s tokens needs %s of device memory with its layers unsliced "+
				"(budget %s, %s after the weights; the %s backend slices layers only when a layer's routed experts fit the device at once)",
				ErrBudget, numtext.Commas(p.Longest), numtext.Bytes(int64(p.Longest)*(act+state)), numtext.Bytes(p.DeviceBudget), numtext.Bytes(avail), e.Model.Ops.Name())
		}
		slice = wave
	case slice > 0:
		// the most tokens a slice takes: what the budget holds, when it holds less
		slice = min(slice, wave)
		if e.maxRows > 0 {
			slice = min(slice, e.maxRows)
		}
		p.HostState = int64(wave)*state+int64(slice)*act > avail
		// With the state off the device the running slice still holds its own beside its activations
		// (DevicePeak below): a slice that fits only by its activations overran the budget by its state.
		if fit := int(avail / (actH + state)); p.HostState && slice > fit {
			if fit < int(least) {
				return p, fmt.Errorf("%w: the device budget of %s leaves %s after %s of weights and %s of carries, "+
					"less than a slice of %d tokens and its state need (%s); give more with --device-memory",
					ErrBudget, numtext.Bytes(p.DeviceBudget), numtext.Bytes(avail), numtext.Bytes(p.WeightBytes), numtext.Bytes(carry), least, numtext.Bytes(least*(actH+state)))
			}
			// rounded as the planned slices are (roundSlice), so that a budget a few MB apart from one wave
			// to the next plans the same slices: state buffers in host memory are pinned per size
			// (statebufs.go), and run 131's H100 pinned 7.5 GB again every wave for slices of 52,093 then
			// 52,108 tokens, 3.1 s of a 9.9 s wave in AllocHost and FreeHost
			if r := roundSlice(fit); r >= int(least) {
				fit = r
			}
			p.Note = fmt.Sprintf("--slice-tokens %s capped at %s: the device budget holds no larger slice beside its state",
				numtext.Commas(e.opts.SliceTokens), numtext.Commas(fit))
			slice = fit
		}
	default:
		if int64(wave)*(act+state) <= avail {
			slice = wave // everything fits at once
		} else if rest := avail - int64(wave)*state; rest >= int64(min(wave, 4096))*act {
			slice = int(rest / act) // state on the device, layers in slices
		} else {
			// Part of the state in host memory: slices as large as the budget holds beside their own state,
			// the rest keeping other slices' state on the device; halved while the state left for the host
			// does not fit there (smaller slices leave room on the device for more slices' state). What a
			// slice costs beyond its rows (a layer's weights read again by the device, an expert-major
			// layer's expert call) falls with the slice count: in run 38 slices of 2,048, half the budget
			// going to other slices' state, took 896 expert calls and 8.4 s a MoE layer; slices of 5,120,
			// 364 calls and 3.5 s.
			p.HostState = true
			slice = roundSlice(int(avail / (actH + state)))
			for slice/2 >= min(sliceFloor, wave) && int64(hostTokens(wave, slice, avail, actH, state))*hostState > stateBudget {
				slice = roundSlice(slice / 2)
			}
		}
		if e.maxRows > 0 && slice > e.maxRows { // what the backend can index (ops.ElementLimit)
			slice = e.maxRows
		}
		if slice < wave { // a wave that fits whole stays one slice, however many tokens it has
			slice = roundSlice(slice)
		}
		slice = min(slice, wave)
		if !p.HostState {
			slice = evenSlices(wave, slice)
		}
	}
	// One pool (sharedMemory): where the state kept apart is smaller (bfloat16 against the device's
	// float32), the running slice keeps its activations and state as a device would and every other
	// token's state waits as bfloat16 in what the slice leaves of the pool, no slice's state held twice
	// (none on the "device" beside the running one's): about twice the tokens a read of float32 state.
	pool := int64(-1)
	if e.sharedMemory() && p.HostState && hostState < state {
		pool = avail
	}
	shareOut := func(slice int) { // the slice's share of the pool, and the state's
		if pool >= 0 {
			avail = int64(slice) * (act + state)
			stateBudget = pool - avail
		}
	}
	shareOut(slice)
	if p.HostState && int64(hostTokens(wave, slice, avail, actH, state))*hostState > stateBudget {
		// the sequences go in several waves, each as large as the device and the host hold
		waveOf := func(slice int) int {
			shareOut(slice)
			return devSlices(slice, avail, actH, state)*slice + int(max(stateBudget, 0)/hostState)
		}
		wave = waveOf(slice)
		// Smaller slices leave the device room for more slices' state: below the floor the slicing above
		// keeps to rather than refuse a sequence (a larger device budget once refused what a smaller one
		// planned, its larger slices leaving no room for a second slice's state)
		for wave < p.Longest && slice/2 >= int(least) {
			slice = roundSlice(slice / 2)
			wave = waveOf(slice)
		}
		p.wavesWhy = fmt.Sprintf("the state of no more fits the host budget of %s (%s) beside %s of read buffers", numtext.Bytes(p.HostBudget), e.hostBudgetSource(), numtext.Bytes(reserve+p.StashBytes))
		if e.sharedMemory() {
			p.wavesWhy = fmt.Sprintf("the state of no more fits the %s backend's memory budget of %s beside %s of read buffers (it computes in host memory: --host-memory)",
				e.Model.Ops.Name(), numtext.Bytes(p.HostBudget), numtext.Bytes(reserve))
		}
		if wave < p.Longest && e.sharedMemory() {
			size := int64(p.Longest) * state
			if pool >= 0 {
				size = int64(p.Longest) * hostState
			}
			return p, fmt.Errorf("%w: the state of a sequence of %s tokens (%s) does not fit the %s backend's memory budget of %s beside %s of read buffers, %s of weights and carries and a slice's activations (it computes in host memory: --host-memory)",
				ErrBudget, numtext.Commas(p.Longest), numtext.Bytes(size), e.Model.Ops.Name(), numtext.Bytes(p.HostBudget), numtext.Bytes(reserve), numtext.Bytes(p.WeightBytes+carry))
		}
		if wave < p.Longest {
			return p, fmt.Errorf("%w: the state of a sequence of %s tokens (%s) does not fit the host budget of %s (%s) beside %s of read buffers and expert inputs and what the device holds",
				ErrBudget, numtext.Commas(p.Longest), numtext.Bytes(int64(p.Longest)*hostState), numtext.Bytes(p.HostBudget), e.hostBudgetSource(), numtext.Bytes(reserve+p.StashBytes))
		}
	}
	p.WaveTokens, p.SliceTokens = wave, slice
	p.Waves = waveCount(lens, wave)
	p.Slices = (wave + slice - 1) / max(slice, 1)
	p.StateBytes = int64(wave) * state
	p.DevicePeak = p.WeightBytes + carry + int64(min(slice, wave))*act
	if p.ExpertMajor {
		p.ExpertPool = int64(min(slice, wave)) * callAct
	}
	if p.HostState {
		p.DeviceSlices = min(devSlices(slice, avail, actH, state), p.Slices)
		p.HostState = p.DeviceSlices < p.Slices
	}
	if p.HostState {
		onDevice := min(p.DeviceSlices*slice, wave)
		p.HostBytes = int64(wave-onDevice) * hostState
		p.StateBytes = int64(onDevice)*state + p.HostBytes
		p.DevicePeak += int64(min(onDevice+slice, wave)) * state // the resident slices' and the running one's
		p.DevicePeak += int64(min(slice, wave)) * (actH - act)   // the next one's on its way in, the last's out
	} else {
		p.DevicePeak += int64(wave) * state
	}
	return p, nil
}

// devSlices is how many slices of n tokens keep their state on the device beside the running slice's
// activations and state, of avail bytes.
func devSlices(n int, avail, act, state int64) int {
	return int(max(0, (avail-int64(n)*(act+state))/(int64(n)*state)))
}

// hostTokens is how many tokens of a wave keep their state in host memory with slices of n tokens.
func hostTokens(wave, n int, avail, act, state int64) int {
	return max(0, wave-devSlices(n, avail, act, state)*n)
}

// starvedSlice is the slice below which a sliced plan, every routed expert of a layer on the device,
// gives way to a chunked one of larger slices: an expert's weights are read from device memory once a
// slice for the rows it serves there, about 16/896 of the slice's at K3's routing, so at a few hundred
// tokens a slice the MoE layers are bound by those reads many times over.
const starvedSlice = 1024

// sliceFloor is the smallest slice the planner halves to for room on the device: below it a layer's
// matmuls run on too few rows to keep the device busy, and more reads cost less than smaller slices.
const sliceFloor = 4096

// evenSlices is the slice size that cuts a wave of wave tokens into as many slices as slices of at most
// most tokens would, all of about one size (above 1,024 tokens rounded up to a multiple of 1,024, as
// roundSlice leaves most): a wave of 262,144 tokens with room for 86,016 runs as four slices of 65,536
// instead of three of 86,016 and a last one of 4,096, whose ops would run far below the device's rate.
func evenSlices(wave, most int) int {
	if most >= wave || most < 1 {
		return most
	}
	n := (wave + most - 1) / most
	s := (wave + n - 1) / n
	if most > 1024 {
		s = (s + 1023) / 1024 * 1024
	}
	return min(s, most)
}

// roundSlice rounds a slice size down to a multiple of 1,024 tokens when it is larger.
func roundSlice(n int) int {
	if n > 1024 {
		return n / 1024 * 1024
	}
	return max(n, 1)
}

// waveCount is how many waves runSplit makes of sequences lens with at most limit tokens each.
func waveCount(lens []int, limit int) int {
	waves, tokens := 0, 0
	for _, n := range lens {
		if tokens > 0 && tokens+n > limit {
			waves, tokens = waves+1, 0
		}
		tokens += n
	}
	if tokens > 0 {
		waves++
	}
	return max(waves, 1)
}
