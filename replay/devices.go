package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// deviceGroup runs an engine's waves over several devices that share one weight stream
// (EngineOptions.Devices): the wave's sequences are spread over the devices by tokens, every device runs
// its share through the layers (its own slices, state and carries, planned on its own budget), and one
// feed reads each layer and each chosen expert once into host memory for all of them. A sequence's
// results are the bits it gets on one device, since they do not depend on its wave.
type deviceGroup struct {
	engines []*Engine            // one per device; [0] is the engine the caller holds
	last    []WaveStats          // per device: what the last wave sent it (zero for a device without a share)
	cur     atomic.Pointer[feed] // the feed of the wave running, nil between waves
}

// heldBytes is the host memory the running wave's feed holds: weights read and not yet uploaded by
// every device.
func (g *deviceGroup) heldBytes() int64 {
	if g == nil {
		return 0
	}
	if f := g.cur.Load(); f != nil {
		return f.held.Load()
	}
	return 0
}

// openDevices makes the engines of EngineOptions.Devices beside e (device 0), their globals uploaded
// from src, the bytes e read its own from: the global weights too are read once. Each device's host
// memory budget for the state is the host's divided among the devices.
func (e *Engine) openDevices(ctx context.Context, src model.Source) error {
	if len(e.opts.Devices) == 0 {
		return nil
	}
	n := 1 + len(e.opts.Devices)
	sub := e.opts
	sub.HostMemory = e.hostBudget() / int64(n)
	e.opts.HostMemory = sub.HostMemory
	sub.Devices, sub.HostCacheBytes, sub.Progress, sub.Log = nil, 0, nil, nil
	g := &deviceGroup{engines: []*Engine{e}}
	for k, b := range e.opts.Devices {
		// a sequence's bits are one device's only if every device computes as the first does
		if own := e.Model.Ops; b.Name() != own.Name() || b.Precision() != own.Precision() {
			g.closeOthers()
			return fmt.Errorf("device %d: a %s backend in %s beside a %s backend in %s: the devices of an engine must be alike",
				k+1, b.Name(), b.Precision(), own.Name(), own.Precision())
		}
		d := &Engine{Plan: e.Plan, Model: model.New(e.Plan, b), reader: e.reader, opts: sub, pool: newHostPool(b),
			kept: newResidentLayers(sub.ResidentBytes), state: newStateBufs(b)}
		if l, ok := b.(ops.ElementLimit); ok { // as NewEngine: activations within what the backend indexes
			d.maxRows = int(min(l.MaxElements()/int64(e.Plan.WidestActivation()), 1<<40))
		}
		var err error
		if src == nil { // EngineOptions.PlanOnly
			g.engines = append(g.engines, d)
			continue
		}
		if d.globals, err = d.Model.LoadGlobals(ctx, src); err != nil {
			g.closeOthers()
			return fmt.Errorf("device %d: %w", k+1, err)
		}
		g.engines = append(g.engines, d)
	}
	e.group = g
	shareHost(e.pool, e.opts.Devices) // the feed reads into e.pool: every device copies from it directly
	return nil
}

// closeOthers closes the engines of devices 1.. (device 0 is the caller's to close).
func (g *deviceGroup) closeOthers() {
	if g == nil {
		return
	}
	for _, d := range g.engines[1:] {
		d.Close()
	}
	g.engines = g.engines[:1]
}

// Devices is the number of devices the engine spreads its waves over (1 without EngineOptions.Devices).
func (e *Engine) Devices() int {
	if e.group == nil {
		return 1
	}
	return len(e.group.engines)
}

// DeviceStats is what the last wave sent each device (one entry a device; nil on one device): the
// bytes each one uploaded, which the feed read once for all (the WaveStats Run returns).
func (e *Engine) DeviceStats() []WaveStats {
	if e.group == nil {
		return nil
	}
	return slices.Clone(e.group.last)
}

// member is one sequence of a run over devices: where it came from and its tokens.
type member struct{ req, seq, tokens int }

// run is Engine.Run over the devices: the same refusals before any compute, then the sequences in one
// wave spread over the devices, or in several when a device cannot hold its share in one read.
func (g *deviceGroup) run(ctx context.Context, reqs []Request) ([][]Result, WaveStats, error) {
	e := g.engines[0]
	limit := e.opts.MaxWaveTokens
	var all []member
	out := make([][]Result, len(reqs))
	for i := range reqs {
		if err := reqs[i].Validate(e.Model.Dims.Vocab, len(e.Plan.Layers), Limits{}); err != nil {
			return nil, WaveStats{}, fmt.Errorf("request %d: %w", i, err)
		}
		out[i] = make([]Result, len(reqs[i].Sequences))
		for j, s := range reqs[i].Sequences {
			if limit > 0 && len(s.Tokens) > limit {
				return nil, WaveStats{}, fmt.Errorf("request %d: sequence %d has %d tokens, more than the %d a wave may hold (MaxWaveTokens)", i, j, len(s.Tokens), limit)
			}
			all = append(all, member{i, j, len(s.Tokens)})
		}
	}
	st, err := g.runMembers(ctx, reqs, all, out)
	if err != nil {
		return nil, st, err
	}
	return out, st, nil
}

// runMembers runs ms as one wave when every device can hold its share in one read (and under
// MaxWaveTokens), else as two halves, each split again as needed; results go to out.
func (g *deviceGroup) runMembers(ctx context.Context, reqs []Request, ms []member, out [][]Result) (WaveStats, error) {
	shares := spread(ms, len(g.engines))
	plans := make([]WavePlan, len(shares))
	fits := true
	for d, sh := range shares {
		if len(sh) == 0 {
			continue
		}
		lens, tokens := make([]int, len(sh)), 0
		for i, m := range sh {
			lens[i], tokens = m.tokens, tokens+m.tokens
		}
		p, err := g.engines[d].planWave(lens)
		if err != nil {
			return WaveStats{}, fmt.Errorf("device %d: %w", d, err)
		}
		limit := g.engines[d].opts.MaxWaveTokens
		fits = fits && p.Waves <= 1 && tokens <= p.WaveTokens && (limit <= 0 || tokens <= limit)
		plans[d] = p
	}
	if !fits && len(ms) > 1 {
		g.engines[0].log(fmt.Sprintf("devices: a wave of %d sequences does not fit the devices in one read: halved, each half reading the weights again", len(ms)))
		return g.halves(ctx, reqs, ms, out)
	}
	st, err := g.runOnce(ctx, reqs, shares, plans, out)
	if err != nil && errors.Is(err, ops.ErrOutOfMemory) && ctx.Err() == nil && len(ms) > 1 {
		// As Engine.runFitted: a plan the device did not hold is the plan's bug; smaller waves give the
		// same bits.
		g.engines[0].log(fmt.Sprintf("warning: out of device memory in a wave over %d devices that the plans accepted: "+
			"retrying in halves, each reading the weights again; please report this with the plan lines: %v", len(g.engines), err))
		return g.halves(ctx, reqs, ms, out)
	}
	return st, err
}

// halves runs ms as two waves of about half the tokens each.
func (g *deviceGroup) halves(ctx context.Context, reqs []Request, ms []member, out [][]Result) (WaveStats, error) {
	total := 0
	for _, m := range ms {
		total += m.tokens
	}
	cut, sum := 1, ms[0].tokens
	for cut < len(ms)-1 && 2*(sum+ms[cut].tokens) <= total {
		sum += ms[cut].tokens
		cut++
	}
	a, err := g.runMembers(ctx, reqs, ms[:cut], out)
	if err != nil {
		return a, err
	}
	b, err := g.runMembers(ctx, reqs, ms[cut:], out)
	return a.add(b), err
}

// spread deals sequences to n devices by tokens: longest first, each to the device with the fewest
// tokens so far (the lowest index among equals); each share keeps the sequences' order.
func spread(ms []member, n int) [][]member {
	order := make([]int, len(ms))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return ms[b].tokens - ms[a].tokens })
	load := make([]int, n)
	owner := make([]int, len(ms))
	for _, i := range order {
		d := 0
		for k := range load {
			if load[k] < load[d] {
				d = k
			}
		}
		owner[i], load[d] = d, load[d]+ms[i].tokens
	}
	shares := make([][]member, n)
	for i, m := range ms {
		shares[owner[i]] = append(shares[owner[i]], m)
	}
	return shares
}

// runOnce runs one wave: each device with a share runs it on its own goroutine, fed by one feed.
func (g *deviceGroup) runOnce(ctx context.Context, reqs []Request, shares [][]member, plans []WavePlan, out [][]Result) (WaveStats, error) {
	e := g.engines[0]
	var active []int
	tokens, seqs := 0, 0
	for d, sh := range shares {
		if len(sh) > 0 {
			active = append(active, d)
			for _, m := range sh {
				tokens += m.tokens
			}
			seqs += len(sh)
		}
	}
	line := groupPlanLine(plans, active, len(g.engines))
	e.log(line)
	f := newFeed(e, len(active))
	g.cur.Store(f)
	defer g.cur.Store(nil)
	prog := newGroupProgress(e.opts.Progress, f, len(active), tokens, line)
	logf, userProgress := e.opts.Log, e.opts.Progress
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make([][][]Result, len(g.engines))
	stats := make([]WaveStats, len(g.engines))
	errs := make([]error, len(g.engines))
	var wg sync.WaitGroup
	var logMu sync.Mutex // the devices log from their own goroutines: one line at a time
	for k, d := range active {
		eng := g.engines[d]
		df := &deviceFeed{f: f, dev: k}
		eng.feed = df
		eng.opts.Progress = prog.device(k)
		eng.opts.Log = nil
		if logf != nil {
			eng.opts.Log = func(s string) {
				logMu.Lock()
				defer logMu.Unlock()
				logf(fmt.Sprintf("device %d: %s", d, s))
			}
		}
		wave := make([]Request, len(shares[d]))
		for i, m := range shares[d] {
			wave[i] = Request{Sequences: []Sequence{reqs[m.req].Sequences[m.seq]}, Options: reqs[m.req].Options}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer df.finish()
			res[d], stats[d], errs[d] = eng.runWave(ctx, wave, &plans[d])
			if errs[d] != nil {
				cancel() // the other devices stop at their next layer or read
			}
		}()
	}
	wg.Wait()
	for _, d := range active {
		g.engines[d].feed = nil
		g.engines[d].opts.Progress, g.engines[d].opts.Log = nil, nil
	}
	e.opts.Progress, e.opts.Log = userProgress, logf
	all := f.close()
	all.Sequences, all.Tokens = seqs, tokens
	for _, d := range active {
		all.Seconds = max(all.Seconds, stats[d].Seconds)
	}
	g.last = stats
	if err := firstError(errs, active); err != nil {
		return all, err
	}
	for _, d := range active {
		for i, m := range shares[d] {
			r := res[d][i][0]
			r.SeqID = int32(m.seq)
			out[m.req][m.seq] = r
		}
	}
	return all, nil
}

// firstError is the error of the first device that failed on its own, before those that stopped because
// it did (a cancelled context), named by device.
func firstError(errs []error, active []int) error {
	var first error
	for _, d := range active {
		if errs[d] == nil {
			continue
		}
		err := fmt.Errorf("device %d: %w", d, errs[d])
		if !errors.Is(errs[d], context.Canceled) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// groupPlanLine is the combined plan of a wave over the active of n devices, printed before the devices'
// own plans: "devices 2 of 2: wave 4,096 tokens (8 sequences, longest 1,000) in 1 read for all: device 0
// 2,048 tokens (4 sequences, 1 slice, peak 3.4 MB of 3.5 MB); device 1 ...".
func groupPlanLine(plans []WavePlan, active []int, n int) string {
	tokens, seqs, longest := 0, 0, 0
	var parts []string
	for _, d := range active {
		p := plans[d]
		tokens, seqs, longest = tokens+p.Tokens, seqs+p.Sequences, max(longest, p.Longest)
		slice := "1 slice"
		if p.Slices > 1 {
			slice = fmt.Sprintf("%d slices of %s", p.Slices, numtext.Commas(p.SliceTokens))
		}
		parts = append(parts, fmt.Sprintf("device %d %s (%s, %s, peak %s of %s)",
			d, numtext.Count(p.Tokens, "token"), numtext.Count(p.Sequences, "sequence"), slice, numtext.Bytes(p.DevicePeak), numtext.Bytes(p.DeviceBudget)))
	}
	return fmt.Sprintf("devices %d of %d: wave %s (%s, longest %s) in 1 read for all: %s",
		len(active), n, numtext.Count(tokens, "token"), numtext.Count(seqs, "sequence"), numtext.Commas(longest), strings.Join(parts, "; "))
}

// freeGlobals frees global weights uploaded to m's backend.
func freeGlobals(m *model.Model, g *model.Globals) {
	for _, t := range []ops.Tensor{g.Embed, g.Norm, g.OutputMix, g.LMHead} {
		m.Ops.Free(t)
	}
}

// plan is Engine.PlanWave over the devices: the sequences spread as Run spreads them, each device's
// share planned on its own budgets, and the plans summed into one: its tokens, sequences, state and host
// bytes add up, its reads are the most any device needs, its waves hold what every device holds in one
// (WaveTokens, the sum of the devices'), its device figures are the largest device's. Note names the
// devices.
func (g *deviceGroup) plan(lens []int) (WavePlan, error) {
	ms := make([]member, len(lens))
	for i, n := range lens {
		ms[i] = member{0, i, n}
	}
	var out WavePlan
	active := 0
	for d, sh := range spread(ms, len(g.engines)) {
		if len(sh) == 0 {
			continue
		}
		share := make([]int, len(sh))
		for i, m := range sh {
			share[i] = m.tokens
		}
		p, err := g.engines[d].planWave(share)
		if err != nil {
			return p, fmt.Errorf("device %d: %w", d, err)
		}
		if active == 0 {
			out = p
		} else {
			out.Tokens, out.Sequences, out.Longest = out.Tokens+p.Tokens, out.Sequences+p.Sequences, max(out.Longest, p.Longest)
			out.Waves, out.WaveTokens = max(out.Waves, p.Waves), out.WaveTokens+p.WaveTokens
			out.Slices, out.SliceTokens = max(out.Slices, p.Slices), max(out.SliceTokens, p.SliceTokens)
			out.HostState, out.DeviceSlices = out.HostState || p.HostState, max(out.DeviceSlices, p.DeviceSlices)
			out.StateBytes, out.HostBytes = out.StateBytes+p.StateBytes, out.HostBytes+p.HostBytes
			out.DevicePeak, out.WeightBytes = max(out.DevicePeak, p.DevicePeak), max(out.WeightBytes, p.WeightBytes)
			out.HostBudget += p.HostBudget
		}
		active++
	}
	if out.Waves <= 1 {
		out.Waves, out.WaveTokens = 1, out.Tokens
	}
	out.Note = fmt.Sprintf("over %d of %d devices (device figures: the largest)", active, len(g.engines))
	return out, nil
}
