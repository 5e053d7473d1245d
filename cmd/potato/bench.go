package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/kernel/server"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/synth"
)

func init() {
	commands["bench"] = command{"time waves through a model and report them as ratios to the physical bound", runBench}
}

// benchFlags are the flags of `potato bench`.
type benchFlags struct {
	mem                                                                           memoryFlags // --slice-tokens, --device-memory, --host-memory
	backend, preset, precision, model, waves                                      string
	seed                                                                          uint64
	seqLen, repeat, expertChunk, readWorkers                                      int
	expertStreams                                                                 int
	prefetch                                                                      int
	boundFlops, boundBandwidth                                                    float64
	cpuProfile                                                                    string
	hostCache, resident                                                           byteSize
	directIO, opProfile, eagerRounding, eagerWidening, unfusedMixNorm, mlaMmaSync bool
	noReadAhead                                                                   bool
	planOnly                                                                      bool
	maxWave                                                                       int
}

// benchUsage is the head of `potato help bench`.
const benchUsage = `usage: potato bench [--preset NAME [--seed N] | --model DIR] [--backend cpu|cuda] [--tokens N,N...] [--seq-len N] [flags]

Times waves of random token ids through a model (a synthetic preset, written to the cache on first use,
or --model DIR) and reports each layer kind's time against the physical bound: the bytes of weights read
at the measured (or given) bandwidth, and the FLOPs at the measured (or given) matmul rate. The plan
line of each wave size goes to stdout; what runs before the tables (the bound, the warm-up) to stderr.
`

func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	return benchTo(ctx, args, stdout, os.Stderr)
}

// benchTo is runBench with the progress lines (what runs before the tables: the bound, the warm-up)
// written to stderr.
func benchTo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f benchFlags
	fs := newFlags("bench", benchUsage)
	fs.StringVar(&f.backend, "backend", "cpu", "backend: cpu or cuda")
	fs.StringVar(&f.preset, "preset", "small", "synthetic preset to bench (written to the cache on first use), unless --model")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the synthetic preset")
	fs.StringVar(&f.model, "model", "", "bench this model directory instead of a preset")
	fs.StringVar(&f.precision, "precision", "bf16", "bf16 or fp32")
	fs.StringVar(&f.waves, "tokens", "256,1024", "wave sizes in tokens, comma-separated")
	fs.IntVar(&f.seqLen, "seq-len", 256, "tokens per sequence in a wave")
	fs.IntVar(&f.repeat, "repeat", 3, "timed runs per wave size (the median is reported)")
	fs.IntVar(&f.expertChunk, "expert-chunk", 0, "routed experts resident at once per MoE layer (0: all chosen, or on a device too small for them the largest chunk the plan fits)")
	fs.IntVar(&f.expertStreams, "expert-streams", 0, "cuda: streams the routed experts' GEMMs are spread over (0: the backend's default, 1: the compute stream alone); results do not depend on it")
	fs.BoolVar(&f.eagerRounding, "eager-rounding", false, "cuda: round each matmul's output in the matmul instead of leaving it to the op that reads it (the same bits; for comparing the two)")
	fs.BoolVar(&f.eagerWidening, "eager-widening", false, "cuda: the norms and MulSigmoid write their float32 outputs beside the bfloat16 copies their matmuls read (the same bits; for comparing the two)")
	fs.BoolVar(&f.unfusedMixNorm, "unfused-mix-norm", false, "cuda: each AttnRes mix and the norm that reads it as two ops instead of one kernel (the same bits; for comparing the two)")
	fs.BoolVar(&f.mlaMmaSync, "mla-mma-sync", false, "cuda: MLA's attention on the mma.sync kernel where an sm_90a device runs the wgmma one (the same bits; for comparing the two)")
	fs.Float64Var(&f.boundFlops, "bound-flops", 0, "arithmetic rate of the bound in FLOP/s (0: measure the backend's MatMul); an H200's bf16 rate is about 790e12")
	fs.Float64Var(&f.boundBandwidth, "bound-bandwidth", 0, "weight bandwidth of the bound in bytes/s (0: measure reading the checkpoint); pinned host-to-device on an H200 is about 55e9")
	fs.IntVar(&f.readWorkers, "read-workers", 0, "positioned reads of the checkpoint in flight at most (0: the reader's default, max(16, 4 x GOMAXPROCS))")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the timed waves to this file")
	fs.Var(&f.hostCache, "host-cache", "keep weights in host memory between waves, up to this size (e.g. 40GB; page-locked on cuda; 0 or unset: none, every wave reads the checkpoint): an untimed first wave fills it, and the timed waves stream the weights from memory instead of the checkpoint")
	fs.Var(&f.resident, "resident", "keep the layers' own weights (all but routed experts) on the backend between waves, up to this many checkpoint bytes (e.g. 10GB; device memory on cuda; 0 or unset: none): the timed waves then move only the experts of the layers kept")
	fs.IntVar(&f.prefetch, "prefetch-experts", -1, "routed experts of an MoE layer uploaded from the host cache before its router runs, in large waves (-1: all) (needs --host-cache)")
	fs.BoolVar(&f.noReadAhead, "no-expert-read-ahead", false, "read a MoE layer's routed experts from the checkpoint only once its router has chosen them; by default a wave large enough to choose nearly all of them (tokens x top-k >= 4 x experts) reads them ahead, as soon as the layer's own weights are read, into up to one layer's worth of host memory (the plan line says so); results do not depend on it")
	f.mem.register(fs)
	fs.BoolVar(&f.planOnly, "plan-only", false, "print each wave size's plan (reads, slices, where the state lives, device peak) and stop, without computing")
	fs.BoolVar(&f.directIO, "direct-io", false, "read the checkpoint with O_DIRECT, bypassing the page cache (from the disk itself)")
	fs.BoolVar(&f.opProfile, "op-profile", false, "print, per layer kind, each op's calls and device time (MatMul by weight shape) against the layers' wall time, and where its device memory peaks (the op at whose call the most was allocated, the ops that took the most of their own), from the median run (cuda backend only; the ops are timed with CUDA events; without it the device timeline the cuda backend always prints times only the layers' ends)")
	fs.IntVar(&f.maxWave, "max-wave-tokens", server.DefaultLimits.MaxWaveTokens, "largest wave size --tokens may give (as potato replay and serve); a larger one is refused before anything is built")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("bench", "bench: unexpected argument %q", fs.Arg(0))
	}
	sizes, err := f.check()
	if err != nil {
		return err
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	dir := f.model
	if dir == "" {
		fmt.Fprintf(stderr, "bench: preset %s seed %d (written to the cache on first use)\n", f.preset, f.seed)
		if dir, err = synth.CachedVerified(ctx, f.preset, f.seed, stderr); err != nil {
			return err
		}
	}
	opts := replay.EngineOptions{ExpertChunk: f.expertChunk,
		HostCacheBytes: int64(f.hostCache), ResidentBytes: int64(f.resident), PrefetchExperts: f.prefetch,
		ExpertReadAhead: readAheadOption(f.noReadAhead), Log: planPrinter(stdout), PlanOnly: f.planOnly}
	f.mem.apply(&opts)
	l, err := openEngine(ctx, dir, f.backend, f.precision, backendTuning{expertStreams: f.expertStreams, eagerRounding: f.eagerRounding, eagerWidening: f.eagerWidening,
		unfusedMixNorm: f.unfusedMixNorm, mlaMmaSync: f.mlaMmaSync, devices: f.mem.devices}, opts,
		checkpoint.WithReadConcurrency(f.readWorkers), checkpoint.WithDirectIO(f.directIO))
	if err != nil {
		return err
	}
	defer l.Close()
	if f.planOnly {
		for _, n := range sizes {
			_, lens := benchRequest(n, f.seqLen, l.engine.Model.Dims.Vocab)
			p, err := l.engine.PlanWave(lens)
			if err != nil {
				fmt.Fprintf(stdout, "plan: %s: %v\n", numtext.Count(n, "token"), err)
				continue
			}
			fmt.Fprintln(stdout, "plan: "+p.String())
		}
		return nil
	}
	cached := f.hostCache > 0
	// Measuring the bound and the warm-up take tens of seconds on a large model: say what runs (stderr).
	if f.boundBandwidth == 0 || f.boundFlops == 0 {
		fmt.Fprintf(stderr, "bench: measuring the bound (weight bandwidth: up to %d GB of the checkpoint read; matmul rate)\n", measureReadCap>>30)
	}
	bound, err := measureBound(ctx, l, f.boundBandwidth == 0, f.boundFlops == 0, cached)
	if err != nil {
		return err
	}
	src := [2]string{"measured over the checkpoint", "measured: the backend's MatMul"}
	if cached {
		src[0] = "measured: uploads from host memory"
	}
	if f.boundBandwidth > 0 {
		bound.readBps, src[0] = f.boundBandwidth, "given"
	}
	if f.boundFlops > 0 {
		bound.flops, src[1] = f.boundFlops, "given"
	}
	fmt.Fprintf(stdout, "bench %s: %s, %s on %s; bound: weight bandwidth %.2f GB/s (%s), matmul %.1f GFLOP/s (%s)\n",
		time.Now().Format("2006-01-02"), dir, l.precision, l.backend, bound.readBps/1e9, src[0], bound.flops/1e9, src[1])
	if cb, ok := l.engine.Model.Ops.(*cuda.Backend); ok {
		info := cb.Device()
		fmt.Fprintf(stdout, "device: %s (%d SMs, %.1f GiB), driver %s, cuBLASLt %q", info.Name, info.Multiprocessors,
			float64(info.TotalMemory)/(1<<30), info.Driver, info.CuBLASLtVersion)
		fmt.Fprintln(stdout)
	}
	if cached || f.resident > 0 { // fill the host cache and the resident layers with an untimed wave of the largest size (it chooses the most experts)
		start := time.Now()
		fmt.Fprintf(stderr, "bench: warm-up wave of %s (untimed)\n", numtext.Count(slices.Max(sizes), "token"))
		if _, err := runBenchWave(ctx, l, slices.Max(sizes), f.seqLen); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "warm-up wave of %s: %.2fs; host cache holds %.2f GB (budget %.2f GB), resident layers %.2f GB (budget %.2f GB)\n",
			numtext.Count(slices.Max(sizes), "token"), time.Since(start).Seconds(), float64(l.engine.HostCacheBytes())/1e9, float64(f.hostCache)/1e9,
			float64(l.engine.ResidentBytes())/1e9, float64(f.resident)/1e9)
	}
	// A backend that times its ops (cuda) always gives the layers' device timeline; --op-profile adds
	// the tables of ops.
	var prof *benchProfile
	if p, ok := l.engine.Model.Ops.(ops.OpProfiler); ok {
		prof = &benchProfile{p: p, tables: f.opProfile}
	} else if f.opProfile {
		fmt.Fprintf(stdout, "--op-profile: the %s backend does not time its ops (no ops.OpProfiler); benching without the op profile\n", l.backend)
	}
	for _, n := range sizes {
		if err := pinReadAhead(stdout, l, n, f.seqLen); err != nil {
			return err
		}
		if err := benchWave(ctx, stdout, l, bound, n, f.seqLen, f.repeat, prof); err != nil {
			return err
		}
	}
	// The read buffers the engine keeps between waves (pinned memory on the GPU backend).
	fmt.Fprintf(stdout, "\nhost read buffers kept between waves: %.2f GB\n", float64(l.engine.HostBufferBytes())/1e9)
	return nil
}

// planPrinter prints the engine's plan lines, one a plan: the warm-up and every timed run of a wave size
// plan the same wave, and the same line three times over says nothing more, nor does a line that
// differs only in the free memory its device budget was read from ("device peak 2.9 MB of 18.5 GB").
// A line that differs in anything else prints again: the timed waves' plan can differ from the
// warm-up's in substance (run 124: the host cache, filled by the warm-up, holds every routed expert, so
// nothing is read ahead and more weights stay on the device). Lines that are not plans (warnings)
// always print.
func planPrinter(w io.Writer) func(string) {
	last := ""
	return func(s string) {
		if strings.HasPrefix(s, "wave ") {
			key := deviceBudget.ReplaceAllString(s, "$1")
			if key == last {
				return
			}
			last = key
		}
		fmt.Fprintln(w, "plan: "+s)
	}
}

// deviceBudget matches a plan line's device peak and the budget after it, which planPrinter leaves out
// when it compares two lines.
var deviceBudget = regexp.MustCompile(`(device peak [0-9.,]+ [kMGT]?B) of [0-9.,]+ [kMGT]?B`)

// check refuses, before the model is opened or written, every flag that cannot be benched: wave sizes
// that are not positive or past --max-wave-tokens (a request of that many tokens is built in memory),
// a --seq-len below 1 (the request would never fill), bounds that are negative or not finite (0:
// measure), a --repeat below 1, negative counts, an unknown precision or backend, and the cuda backend's
// tuning flags on another backend. It returns the wave sizes of --tokens.
func (f *benchFlags) check() ([]int, error) {
	if f.maxWave < 1 {
		return nil, fmt.Errorf("bench: --max-wave-tokens %d must be positive", f.maxWave)
	}
	var sizes []int
	for _, s := range strings.Split(f.waves, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		switch {
		case err != nil || n < 1:
			return nil, fmt.Errorf("bench: --tokens: %q is not a wave size (a positive number of tokens)", s)
		case n > f.maxWave:
			return nil, fmt.Errorf("bench: --tokens: a wave of %d tokens is past the limit of %d (--max-wave-tokens)", n, f.maxWave)
		}
		sizes = append(sizes, n)
	}
	if f.seqLen < 1 {
		return nil, fmt.Errorf("bench: --seq-len %d: a sequence needs at least 1 token", f.seqLen)
	}
	if f.repeat < 1 {
		return nil, fmt.Errorf("bench: --repeat %d: at least 1 timed run per wave size", f.repeat)
	}
	for _, b := range []struct {
		flag string
		v    float64
	}{{"--bound-flops", f.boundFlops}, {"--bound-bandwidth", f.boundBandwidth}} {
		if b.v < 0 || math.IsNaN(b.v) || math.IsInf(b.v, 0) {
			return nil, fmt.Errorf("bench: %s %g: want a positive rate (0: measure it)", b.flag, b.v)
		}
	}
	if err := checkNotNegative("bench", intFlag{"--expert-chunk", f.expertChunk}, intFlag{"--expert-streams", f.expertStreams},
		intFlag{"--read-workers", f.readWorkers}); err != nil {
		return nil, err
	}
	if f.prefetch < -1 {
		return nil, fmt.Errorf("bench: --prefetch-experts %d: want a count, or -1 for all", f.prefetch)
	}
	if err := f.mem.check(f.backend); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if _, err := checkEngineFlags(f.backend, f.precision); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if f.backend != "cuda" { // they are cuda.Options: another backend would bench without them, silently
		for _, c := range []struct {
			flag string
			set  bool
		}{{"--expert-streams", f.expertStreams != 0}, {"--eager-rounding", f.eagerRounding}, {"--eager-widening", f.eagerWidening},
			{"--unfused-mix-norm", f.unfusedMixNorm}, {"--mla-mma-sync", f.mlaMmaSync}} {
			if c.set {
				return nil, fmt.Errorf("bench: %s tunes the cuda backend, and --backend is %s: give --backend cuda, or leave it out", c.flag, f.backend)
			}
		}
	}
	return sizes, nil
}

// benchRequest is a request of n random tokens in sequences of seqLen (the last one shorter), and the
// sequences' lengths.
func benchRequest(n, seqLen, vocab int) (replay.Request, []int) {
	r := rand.New(rand.NewPCG(uint64(n), 9))
	var req replay.Request
	var lens []int
	for left := n; left > 0; left -= seqLen {
		t := min(seqLen, left)
		ids := make([]int32, t)
		for i := range ids {
			ids[i] = int32(r.IntN(vocab - 256))
		}
		req.Sequences = append(req.Sequences, replay.Sequence{Tokens: ids})
		lens = append(lens, t)
	}
	return req, lens
}

// pinReadAhead allocates, before the timed waves of n tokens, the host buffers their experts' read-ahead
// and the state their slices keep in host memory use (Engine.PinHostBuffers: page-locked on the CUDA
// backend, where pinning holds back the device's thread), so that the waves
// time what every wave after an engine's first one costs, and says what the one-time cost was. Per size:
// a wave that reads nothing ahead releases the buffers (replay/readahead.go), so a smaller size before a
// larger one would otherwise leave the larger's first timed wave to pin them again.
func pinReadAhead(stdout io.Writer, l *loaded, n, seqLen int) error {
	_, lens := benchRequest(n, seqLen, l.engine.Model.Dims.Vocab)
	start := time.Now()
	got, err := l.engine.PinHostBuffers(lens)
	if err != nil {
		return err
	}
	if got > 0 {
		fmt.Fprintf(stdout, "host buffers (the experts' read-ahead, state kept in host memory): %s allocated in %.2fs before the timed waves of %s (once an engine; a server's first large wave pays it)\n",
			numtext.Bytes(got), time.Since(start).Seconds(), numtext.Count(n, "token"))
	}
	return nil
}

// runBenchWave runs one wave of benchRequest(n, seqLen) and returns its accounting.
func runBenchWave(ctx context.Context, l *loaded, n, seqLen int) (replay.WaveStats, error) {
	req, _ := benchRequest(n, seqLen, l.engine.Model.Dims.Vocab)
	_, st, err := l.engine.Run(ctx, []replay.Request{req})
	return st, err
}

// benchWave times waves of n tokens and prints per-layer-kind times against the bound; with prof, the op
// profile of the median run too.
func benchWave(ctx context.Context, w io.Writer, l *loaded, bd bound, n, seqLen, repeat int, prof *benchProfile) error {
	plan := l.engine.Plan
	req, lens := benchRequest(n, seqLen, l.engine.Model.Dims.Vocab)
	var runs []replay.WaveStats
	var layerTimes, routedTimes [][]float64
	var profiles [][]ops.OpSpan
	cb, _ := l.engine.Model.Ops.(*cuda.Backend)
	if cb != nil {
		if err := cb.ResetMemoryPeak(); err != nil {
			return fmt.Errorf("device memory peak: %w", err)
		}
	}
	for range repeat { // at least 1 (benchFlags.check)
		times, routed := make([]float64, len(plan.Layers)), make([]float64, len(plan.Layers))
		last := 0.0
		if prof != nil {
			if err := prof.start(); err != nil {
				return fmt.Errorf("op profile: %w", err)
			}
		}
		l.engine.SetProgress(func(p replay.Progress) {
			if prof != nil {
				prof.layerDone(p.Layer - 1)
			}
			if p.Layer == 1 { // a request split over waves (the backend's element limit) starts again
				last = 0
			}
			times[p.Layer-1] += p.Seconds - last
			routed[p.Layer-1] += p.RoutedSeconds
			last = p.Seconds
		})
		_, st, err := l.engine.Run(ctx, []replay.Request{req})
		l.engine.SetProgress(nil)
		if err != nil {
			return err
		}
		if prof != nil {
			spans, err := prof.finish()
			if err != nil {
				return err
			}
			profiles = append(profiles, spans)
		}
		runs, layerTimes, routedTimes = append(runs, st), append(layerTimes, times), append(routedTimes, routed)
	}
	mid := medianIndex(runs)
	st, times, routed := runs[mid], layerTimes[mid], routedTimes[mid]
	var flops float64
	for i := range plan.Layers {
		flops += plan.LayerFLOPs(i, lens)
	}
	flops += plan.OutputFLOPs(n)
	// Over --devices the FLOPs split among the devices; each layer's bytes cross every device's own link
	// at once, so the weight bound stays one link's.
	boundS := max(float64(st.BytesRead())/bd.readBps, flops/bd.flops/float64(l.engine.Devices()))
	var cachedB int64
	for _, c := range st.CachedBytes {
		cachedB += c
	}
	fmt.Fprintf(w, "\nwave of %s (%s of up to %s): %.3fs median of %d, %s tokens/s, %.1f MB of weights per pass (%.1f MB from the host cache), %.2f GFLOP; bound %.3fs: ratio %.2f\n",
		numtext.Count(n, "token"), numtext.Count(len(lens), "sequence"), numtext.Commas(seqLen), st.Seconds, len(runs), numtext.Commas(int64(math.Round(float64(n)/st.Seconds))), float64(st.BytesRead())/1e6, float64(cachedB)/1e6, flops/1e9, boundS, st.Seconds/boundS)
	if st.Seconds < boundS {
		// A bound the wave beats is no bound: a rate given by hand, or a measured one that the layers'
		// mix of shapes outruns (the measuring call once sat there: fillBF16 says why).
		fmt.Fprintf(w, "note: the wave beat its bound (ratio below 1), so the bound is not the hardware's ceiling: give --bound-flops and --bound-bandwidth\n")
	}
	printDevices(w, l) // the last run's shares, over --devices
	if cb != nil {
		if err := printMemoryPeak(w, cb); err != nil {
			return err
		}
	}
	if st.ReadAheadBytes+st.ReadAheadUnused > 0 {
		fmt.Fprintf(w, "experts read ahead of their routers: %.1f MB used, %.1f MB read and chosen by no token\n",
			float64(st.ReadAheadBytes)/1e6, float64(st.ReadAheadUnused)/1e6)
	}
	if st.HostAllocBytes > 0 { // what the buffers pinned before the timed waves did not cover
		fmt.Fprintf(w, "host buffers allocated inside the timed wave: %.1f MB (weight-read arenas and buffers PinHostBuffers does not pin; page-locked on cuda: AllocHost in the op profile)\n",
			float64(st.HostAllocBytes)/1e6)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// "to router s": the part of a layer before its router returned (its upload, attention and router),
	// during which no routed expert can be fetched.
	fmt.Fprintln(tw, "layer kind\tlayers\tmean s\tto router s\tMB moved\tGFLOP\tbound s\tratio\t")
	type acc struct {
		n                          int
		secs, routed, bytes, flops float64
	}
	kinds := map[string]*acc{}
	var order []string
	for i, ly := range plan.Layers {
		k := ly.Attn.String() + "+" + ly.FFN.String()
		if kinds[k] == nil {
			kinds[k] = &acc{}
			order = append(order, k)
		}
		a := kinds[k]
		a.n++
		a.secs += times[i]
		a.routed += routed[i]
		a.bytes += float64(st.LayerBytes[i] + st.ExpertBytes[i])
		a.flops += plan.LayerFLOPs(i, lens)
	}
	perLayer := map[string][2]float64{} // kind -> mean seconds and bound seconds of one layer
	for _, k := range order {
		a := kinds[k]
		m := float64(a.n)
		b := max(a.bytes/m/bd.readBps, a.flops/m/bd.flops)
		perLayer[k] = [2]float64{a.secs / m, b}
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t%.2f\t%.2f\t%.4f\t%.2f\t\n", k, a.n, a.secs/m, a.routed/m, a.bytes/m/1e6, a.flops/m/1e9, b, a.secs/m/b)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var layerSecs float64
	for _, t := range times {
		layerSecs += t
	}
	if err := extrapolate(w, plan, perLayer, st.Seconds-layerSecs, "host-side layer times"); err != nil {
		return err
	}
	if prof == nil {
		return nil
	}
	if prof.tables {
		which := fmt.Sprintf("the median run: run %d of %d", mid+1, len(runs))
		var rate *expertRate
		if l.engine.Devices() == 1 { // over several devices each profiles its own share of the experts
			rate = &expertRate{flopsPerLayer: plan.RoutedExpertFLOPs(n), boundFlops: bd.flops}
		}
		if err := printOpProfile(w, which, layerKinds(plan), times, st.Seconds-layerSecs, profiles[mid], rate); err != nil {
			return err
		}
	}
	devLayer, readout, ok, err := deviceTimeline(w, layerKinds(plan), profiles[mid], perLayer)
	if err != nil || !ok {
		return err
	}
	return extrapolate(w, plan, devLayer, readout, "device timeline")
}

// extrapolate prints the time of a full K3 pass at this wave's rates, when the benched model has K3's
// widths (the k3-layer preset): each of K3's 93 layers at the mean of its kind here, plus this wave's
// time outside the layers (embedding and readout), against the same sum of bounds. basis names where the
// layer times come from.
func extrapolate(w io.Writer, plan *model.Plan, perLayer map[string][2]float64, rest float64, basis string) error {
	k3, err := model.NewPlan(model.K3TextConfig())
	if err != nil {
		return err
	}
	if plan.Dims() != k3.Dims() || len(plan.Layers) == len(k3.Layers) {
		return nil // another model's widths, or K3 itself: nothing to extrapolate
	}
	counts := map[string]int{}
	var kinds []string
	for _, ly := range k3.Layers {
		k := ly.Attn.String() + "+" + ly.FFN.String()
		if counts[k] == 0 {
			kinds = append(kinds, k)
		}
		counts[k]++
	}
	total, bound := rest, 0.0
	var parts []string
	for _, k := range kinds {
		t, ok := perLayer[k]
		if !ok {
			_, err := fmt.Fprintf(w, "a full K3 pass: no %s layer benched, not extrapolated\n", k)
			return err
		}
		total += float64(counts[k]) * t[0]
		bound += float64(counts[k]) * t[1]
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	_, err = fmt.Fprintf(w, "a full K3 pass at these rates (%s: %s, plus %.3fs outside the layers): %.1fs; the layers' bound %.1fs\n",
		basis, strings.Join(parts, ", "), rest, total, bound)
	return err
}

// medianIndex returns the index of the run with the median time.
func medianIndex(runs []replay.WaveStats) int {
	idx := make([]int, len(runs))
	for i := range idx {
		idx[i] = i
	}
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && runs[idx[j]].Seconds < runs[idx[j-1]].Seconds; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	return idx[len(idx)/2]
}

// readAheadOption is EngineOptions.ExpertReadAhead for --no-expert-read-ahead: off (negative), or the
// engine's default (one MoE layer's experts within the host budget).
func readAheadOption(off bool) int64 {
	if off {
		return -1
	}
	return 0
}
