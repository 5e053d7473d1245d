package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The op profile of `potato bench --op-profile`: the backend times every op on the device
// (ops.OpProfiler); the bench marks the end of each layer from its progress callback (label: the layer's
// index) and the end of the run ("readout"), and prints, per layer kind, where the device time went.

// opProfileTop is how many ops a kind's table lists; the rest are summed in one "other" row.
const opProfileTop = 15

// readoutLabel marks the span after the last layer: the output path (final norm, lm_head reductions).
const readoutLabel = "readout"

// benchProfile drives an ops.OpProfiler through one timed run. A mark's error, which the progress
// callback cannot return, is kept for finish.
type benchProfile struct {
	p      ops.OpProfiler
	tables bool // print the op tables (--op-profile), not only the device timeline
	err    error
}

// start turns op timing on (clearing what an earlier run left); without the op tables, span timing
// only where the profiler offers it, so that the device timeline carries no op timing.
func (bp *benchProfile) start() error {
	bp.err = nil
	if sp, ok := bp.p.(ops.SpanProfiler); ok && !bp.tables {
		return sp.ProfileSpans(true)
	}
	return bp.p.ProfileOps(true)
}

// layerDone ends layer i's span (layer 0's span also holds the embedding, and in a request the engine
// splits over waves, the previous wave's readout).
func (bp *benchProfile) layerDone(i int) {
	if bp.err == nil {
		bp.err = bp.p.ProfileMark(strconv.Itoa(i))
	}
}

// finish ends the readout's span, collects the spans and turns timing off.
func (bp *benchProfile) finish() ([]ops.OpSpan, error) {
	err := bp.err
	if err == nil {
		err = bp.p.ProfileMark(readoutLabel)
	}
	spans, perr := bp.p.OpProfile()
	if err := errors.Join(err, perr, bp.p.ProfileOps(false)); err != nil { // off, whichever mode was on
		return nil, fmt.Errorf("op profile: %w", err)
	}
	return spans, nil
}

// spanKind returns the layer kind of a span that layerDone labelled (its layer's index), and false for
// any other label.
func spanKind(label string, kinds []string) (string, bool) {
	i, err := strconv.Atoi(label)
	if err != nil || i < 0 || i >= len(kinds) {
		return "", false
	}
	return kinds[i], true
}

// layerKinds returns each layer's kind as the bench groups them: "kda+moe", "mla+moe", "kda+dense".
func layerKinds(plan *model.Plan) []string {
	kinds := make([]string, len(plan.Layers))
	for i, ly := range plan.Layers {
		kinds[i] = ly.Attn.String() + "+" + ly.FFN.String()
	}
	return kinds
}

// profileGroup is what printOpProfile sums for one layer kind (or one span label outside the layers).
type profileGroup struct {
	name    string
	layers  int     // layers of the kind (0 for a label outside the layers)
	wall    float64 // wall seconds of those layers
	device  float64 // their seconds on the device timeline (0 where the spans carry none)
	opSecs  float64 // summed device seconds of their ops
	ops     map[string]*ops.OpTime
	ordered []ops.OpTime
}

// expertRate is what the op profile needs to rate the routed experts of a MoE layer kind: their FLOPs a
// layer (model.Plan.RoutedExpertFLOPs for the wave's tokens) and the bound's arithmetic rate.
type expertRate struct {
	flopsPerLayer, boundFlops float64
}

// expertsOp is the op of the routed experts (its profile rows are keyed by path, and one row holds its
// wait for the experts' uploads: expertsWait).
const (
	expertsOp   = "ExpertsAccumulate"
	expertsWait = expertsOp + " " + ops.UploadWait
)

// printOpProfile prints one run's op profile: for each layer kind (kinds[i] is layer i's) the ops of its
// layers' spans summed (calls, device ms, share of the kind's op time, the device's idle time just before
// them, the host's time inside them and outside any op just before them, in ms; the opProfileTop
// largest, the rest as "other"), and the layers' wall time (wall[i] is layer i's) against the summed op
// time; their difference is time the compute stream stood idle. The spans labelled "readout" are compared with
// outside, the wall time after the last layer. Spans with other labels are printed by label, without a
// wall time. which says which run the numbers come from. With rate, each MoE kind's table ends with the
// routed experts' time a layer (ExpertsAccumulate but its wait for uploads), their FLOP/s and their time
// as a multiple of their share of the bound.
func printOpProfile(w io.Writer, which string, kinds []string, wall []float64, outside float64, spans []ops.OpSpan, rate *expertRate) error {
	groups := map[string]*profileGroup{}
	var order []string
	group := func(name string) *profileGroup {
		g := groups[name]
		if g == nil {
			g = &profileGroup{name: name, ops: map[string]*ops.OpTime{}}
			groups[name] = g
			order = append(order, name)
		}
		return g
	}
	for i, k := range kinds { // the kinds first, in the order of their first layer, even when not timed
		g := group(k)
		g.layers++
		if i < len(wall) {
			g.wall += wall[i]
		}
	}
	for _, s := range spans {
		name, ok := spanKind(s.Label, kinds)
		switch {
		case !ok && s.Label != "":
			name = s.Label
		case !ok:
			name = "(after the last mark)"
		}
		g := group(name)
		g.device += s.Device
		for _, o := range s.Ops {
			t := g.ops[o.Op]
			if t == nil {
				t = &ops.OpTime{Op: o.Op}
				g.ops[o.Op] = t
			}
			t.Calls += o.Calls
			t.Seconds += o.Seconds
			t.IdleBefore += o.IdleBefore
			t.Host += o.Host
			t.HostGap += o.HostGap
			t.MemHigh = max(t.MemHigh, o.MemHigh)
			t.MemOwn = max(t.MemOwn, o.MemOwn)
			g.opSecs += o.Seconds
		}
	}
	if g := groups[readoutLabel]; g != nil {
		g.wall = outside
	}
	if _, err := fmt.Fprintf(w, "\nop profile (%s): device time of each op on the compute stream, between CUDA events around its work\n", which); err != nil {
		return err
	}
	for _, name := range order {
		g := groups[name]
		if err := printProfileGroup(w, g); err != nil {
			return err
		}
		if rate != nil && g.layers > 0 && strings.HasSuffix(g.name, "+"+model.MoE.String()) {
			if err := printExpertRate(w, g, rate); err != nil {
				return err
			}
		}
	}
	return nil
}

// printExpertRate prints the routed experts' line of a MoE kind's table (nothing when none was timed).
func printExpertRate(w io.Writer, g *profileGroup, rate *expertRate) error {
	var secs float64
	calls := 0
	for _, t := range g.ops {
		if strings.HasPrefix(t.Op, expertsOp) && t.Op != expertsWait {
			secs += t.Seconds
			calls += t.Calls
		}
	}
	if secs == 0 || rate.flopsPerLayer <= 0 || rate.boundFlops <= 0 {
		return nil
	}
	m := float64(g.layers)
	_, err := fmt.Fprintf(w, "  routed experts (%s, %d calls a layer): %.3f ms a layer, %.1f TFLOP/s, %.2fx their share of the bound (%.1f TFLOP a layer at %.1f TFLOP/s)\n",
		expertsOp, calls/g.layers, 1e3*secs/m, rate.flopsPerLayer*m/secs/1e12, secs/m/(rate.flopsPerLayer/rate.boundFlops),
		rate.flopsPerLayer/1e12, rate.boundFlops/1e12)
	return err
}

// printProfileGroup prints one kind's summary line and table.
func printProfileGroup(w io.Writer, g *profileGroup) error {
	for _, t := range g.ops {
		g.ordered = append(g.ordered, *t)
	}
	slices.SortFunc(g.ordered, func(x, y ops.OpTime) int {
		if c := cmp.Compare(y.Seconds, x.Seconds); c != 0 {
			return c
		}
		return cmp.Compare(x.Op, y.Op)
	})
	var head string
	switch {
	case g.layers > 0 && g.device > 0:
		// the device timeline's span, not the host's wall time: a host that runs ahead of the device waits
		// for it in some later layer, whose wall time then holds the wait (run 87)
		m := float64(g.layers)
		head = fmt.Sprintf("%s: %s, device %.4fs, ops %.4fs (a layer: device %.4fs, ops %.4fs); device - ops %.4fs (%.0f%% of the device's time: compute stream idle); host wall %.4fs",
			g.name, numtext.Count(g.layers, "layer"), g.device, g.opSecs, g.device/m, g.opSecs/m, g.device-g.opSecs, percent(g.device-g.opSecs, g.device), g.wall)
	case g.layers > 0:
		m := float64(g.layers)
		head = fmt.Sprintf("%s: %s, wall %.4fs, ops %.4fs (a layer: wall %.4fs, ops %.4fs); wall - ops %.4fs (%.0f%% of wall: compute stream idle)",
			g.name, numtext.Count(g.layers, "layer"), g.wall, g.opSecs, g.wall/m, g.opSecs/m, g.wall-g.opSecs, percent(g.wall-g.opSecs, g.wall))
	case g.name == readoutLabel && g.device > 0:
		head = fmt.Sprintf("%s (after the last layer): device %.4fs, ops %.4fs; device - ops %.4fs (%.0f%% of the device's time: compute stream idle); host wall %.4fs",
			g.name, g.device, g.opSecs, g.device-g.opSecs, percent(g.device-g.opSecs, g.device), g.wall)
	case g.name == readoutLabel:
		head = fmt.Sprintf("%s (after the last layer): wall %.4fs, ops %.4fs; wall - ops %.4fs (%.0f%% of wall: compute stream idle)",
			g.name, g.wall, g.opSecs, g.wall-g.opSecs, percent(g.wall-g.opSecs, g.wall))
	default:
		head = fmt.Sprintf("%s: ops %.4fs", g.name, g.opSecs)
	}
	if _, err := fmt.Fprintf(w, "\n%s\n", head); err != nil {
		return err
	}
	if len(g.ordered) == 0 {
		_, err := fmt.Fprintln(w, "  no ops timed")
		return err
	}
	rows := g.ordered
	var folded []ops.OpTime // the ops under "other" that the device stood idle before
	if len(rows) > opProfileTop {
		other := ops.OpTime{Op: fmt.Sprintf("other (%d ops)", len(rows)-opProfileTop)}
		for _, t := range rows[opProfileTop:] {
			if t.IdleBefore >= 1e-3 {
				folded = append(folded, t)
			}
			other.Calls += t.Calls
			other.Seconds += t.Seconds
			other.IdleBefore += t.IdleBefore
			other.Host += t.Host
			other.HostGap += t.HostGap
		}
		rows = append(rows[:opProfileTop:opProfileTop], other)
	}
	width := len("op")
	for _, t := range rows {
		width = max(width, len(t.Op))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %-*s %8s %12s %6s %12s %10s %14s\n", width, "op", "calls", "device ms", "%", "idle before", "host ms", "host gap before")
	for _, t := range rows {
		fmt.Fprintf(&b, "  %-*s %8d %12.3f %6.1f %12.3f %10.3f %14.3f\n", width, t.Op, t.Calls, 1e3*t.Seconds, percent(t.Seconds, g.opSecs), 1e3*t.IdleBefore, 1e3*t.Host, 1e3*t.HostGap)
	}
	writeOpMemory(&b, g.ordered)
	if len(folded) > 0 { // largest first, so that "other"'s idle time has names
		slices.SortFunc(folded, func(x, y ops.OpTime) int { return cmp.Compare(y.IdleBefore, x.IdleBefore) })
		b.WriteString("  idle before ops under other:")
		for i, t := range folded[:min(len(folded), 5)] {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s %s %.3f ms (%d calls; host gap before %.3f ms)", sep, t.Op, 1e3*t.IdleBefore, t.Calls, 1e3*t.HostGap)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// opMemoryTop is how many ops the memory line names by what they took of their own.
const opMemoryTop = 4

// writeOpMemory writes a kind's device-memory line where the backend measured it (ops.OpTime.MemHigh):
// the op at whose call the backend's allocations were at their most, and the ops whose calls added the
// most beyond what was held before them (their outputs and temporaries): where a plan's device count
// for the kind can be checked against what runs.
func writeOpMemory(b *strings.Builder, ts []ops.OpTime) {
	var top ops.OpTime
	var own []ops.OpTime
	for _, t := range ts {
		if t.MemHigh > top.MemHigh {
			top = t
		}
		if t.MemOwn > 0 {
			own = append(own, t)
		}
	}
	if top.MemHigh == 0 {
		return
	}
	fmt.Fprintf(b, "  device memory in these ops: at most %s allocated, in %s (%s of it its own at most)",
		numtext.Bytes(top.MemHigh), top.Op, numtext.Bytes(top.MemOwn))
	slices.SortFunc(own, func(x, y ops.OpTime) int {
		if c := cmp.Compare(y.MemOwn, x.MemOwn); c != 0 {
			return c
		}
		return cmp.Compare(x.Op, y.Op)
	})
	b.WriteString("; the most an op's call took of its own:")
	for i, t := range own[:min(len(own), opMemoryTop)] {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(b, "%s %s %s", sep, t.Op, numtext.Bytes(t.MemOwn))
	}
	b.WriteString("\n")
}

// percent is 100 part / whole, 0 for an empty whole.
func percent(part, whole float64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * part / whole
}

// deviceTimeline prints, when the spans carry device times (ops.OpSpan.Device), each layer kind's mean
// time on the device timeline against the same bound as the wall-time table (bounds: kind -> one layer's
// bound), and returns those means with the bounds (for extrapolate) and the readout's device time. The
// host-side layer times attribute work to the layer the host was queueing while the device ran behind
// it; at large waves the device runs a whole layer behind, and these are the layers' own times. ok is
// false when no span has a device time (nothing is printed).
func deviceTimeline(w io.Writer, kinds []string, spans []ops.OpSpan, bounds map[string][2]float64) (perLayer map[string][2]float64, readout float64, ok bool, err error) {
	type acc struct {
		n    int
		secs float64
	}
	byKind := map[string]*acc{}
	var order []string
	for _, s := range spans {
		if s.Device <= 0 {
			continue
		}
		if s.Label == readoutLabel {
			readout += s.Device
			ok = true
			continue
		}
		k, isLayer := spanKind(s.Label, kinds)
		if !isLayer {
			continue
		}
		if byKind[k] == nil {
			byKind[k] = &acc{}
			order = append(order, k)
		}
		byKind[k].n++
		byKind[k].secs += s.Device
		ok = true
	}
	if !ok {
		return nil, 0, false, nil
	}
	timed := "no op timed" // spans only (ops.SpanProfiler): the timeline carries no op timing
	for _, s := range spans {
		if len(s.Ops) > 0 {
			timed = "every op timed too (--op-profile), which adds to it"
			break
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\non the device timeline (a CUDA event at each layer's end on the compute stream; %s):\n", timed)
	fmt.Fprintf(&b, "  %12s %8s %10s %10s %7s\n", "layer kind", "spans", "s a layer", "bound s", "ratio")
	perLayer = map[string][2]float64{}
	layers := map[string]int{}
	for _, k := range kinds {
		layers[k]++
	}
	for _, k := range order {
		a := byKind[k]
		// A request run as several waves has a span per layer and wave: a layer's time is the sum over
		// its waves, which the bound (of the whole request) is compared with, not the mean of one wave.
		mean := a.secs / float64(max(layers[k], 1))
		bound := bounds[k][1]
		perLayer[k] = [2]float64{mean, bound}
		ratio := 0.0
		if bound > 0 {
			ratio = mean / bound
		}
		fmt.Fprintf(&b, "  %12s %8d %10.4f %10.4f %7.2f\n", k, a.n, mean, bound, ratio)
	}
	fmt.Fprintf(&b, "  %12s %8s %10.4f\n", readoutLabel, "", readout)
	_, err = io.WriteString(w, b.String())
	return perLayer, readout, true, err
}
