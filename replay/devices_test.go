package replay

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// deviceBackend is a CPU backend (slicing, like the real ones) that counts the weight bytes it holds:
// uploads add, Free subtracts.
type deviceBackend struct {
	*cpu.Backend
	liveBytes
}

func (a *deviceBackend) Upload(dt ops.DType, rows, cols int, raw []byte) (ops.Tensor, error) {
	t, err := a.Backend.Upload(dt, rows, cols, raw)
	if err == nil {
		a.add(t, int64(len(raw)))
	}
	return t, err
}

func (a *deviceBackend) UploadExpert(id, latent, ffn int, w1p, w1s, w3p, w3s, w2p, w2s []byte) (ops.Expert, error) {
	x, err := a.Backend.UploadExpert(id, latent, ffn, w1p, w1s, w3p, w3s, w2p, w2s)
	if err == nil {
		a.add(x, int64(len(w1p)+len(w1s)+len(w3p)+len(w3s)+len(w2p)+len(w2s)))
	}
	return x, err
}

func (a *deviceBackend) Free(t any) {
	a.drop(t)
	a.Backend.Free(t)
}

// openDevicesEngine opens plan on n CPU backends (the first the engine's own, the rest
// EngineOptions.Devices), each counting the weights it holds, reading through r.
func openDevicesEngine(t *testing.T, plan *model.Plan, r Reader, n int, prec ops.Precision, opts EngineOptions) (*Engine, []*deviceBackend) {
	t.Helper()
	bs := make([]*deviceBackend, n)
	for i := range bs {
		bs[i] = &deviceBackend{Backend: cpu.New(cpu.Options{Precision: prec})}
	}
	for _, b := range bs[1:] {
		opts.Devices = append(opts.Devices, b)
	}
	e, err := NewEngine(context.Background(), plan, r, bs[0], opts)
	if err != nil {
		t.Fatal(err)
	}
	if e.Devices() != n {
		t.Fatalf("Devices() = %d, want %d", e.Devices(), n)
	}
	return e, bs
}

// TestDevicesBitIdentical: a wave over several devices (two or three CPU backends, the stand-in for
// `--devices 0,0` on one GPU) gives every sequence the bits one device gives it, in every output, with
// expert chunks, slices, the host cache and resident layers; it reads every byte of the checkpoint that
// one device reads, once (the reader sees the same bytes, and the combined stats equal one device's);
// each device gets a share of the tokens and uploads only what its share chose; the later wave of a host
// cache reads nothing; and nothing stays held on any device after Close.
func TestDevicesBitIdentical(t *testing.T) {
	dir := synthModel(t, "tiny", 1)
	plan, err := model.ReadFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	own := ownBytes(plan)
	seqs := randomSequences(11, 3328, 120, 33, 1, 64, 65, 17, 200)
	optsA := Options{TopK: 5, Hidden: []int{0, 4, 7}, Lens: []int{2, 7}, Router: true, AttnRes: true}
	optsB := Options{TopK: 2, Lens: []int{3}}
	reqs := []Request{{Sequences: seqs[:4], Options: optsA}, {Sequences: seqs[4:], Options: optsB}}
	for _, tc := range []struct {
		name    string
		devices int
		prec    ops.Precision
		opts    EngineOptions
		cached  bool // the second wave reads nothing: every byte from the host cache
	}{
		{"two devices", 2, ops.BF16, EngineOptions{}, false},
		{"two devices, fp32", 2, ops.FP32, EngineOptions{}, false},
		{"three devices, chunks of 3", 3, ops.BF16, EngineOptions{ExpertChunk: 3}, false},
		{"two devices, slices of 32", 2, ops.BF16, EngineOptions{SliceTokens: 32}, false},
		{"two devices, slices of 16, chunks of 5", 2, ops.BF16, EngineOptions{SliceTokens: 16, ExpertChunk: 5}, false},
		{"two devices, host cache", 2, ops.BF16, EngineOptions{HostCacheBytes: 1 << 30}, true},
		{"two devices, resident layers and host cache", 2, ops.BF16, EngineOptions{ResidentBytes: own, HostCacheBytes: 1 << 30, ExpertChunk: 4}, true},
		{"three devices, host cache, experts fetched ahead", 3, ops.BF16, EngineOptions{HostCacheBytes: 1 << 30, PrefetchExperts: -1}, true},
		{"two devices, host cache, 5 experts fetched ahead, chunks of 3", 2, ops.BF16, EngineOptions{HostCacheBytes: 1 << 30, PrefetchExperts: 5, ExpertChunk: 3}, true},
		{"nine devices, seven sequences", 9, ops.BF16, EngineOptions{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			one := &countingReader{Dir: d}
			single, err := NewEngine(context.Background(), plan, one, cpu.New(cpu.Options{Precision: tc.prec}), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer single.Close()
			many := &countingReader{Dir: d}
			e, bs := openDevicesEngine(t, plan, many, tc.devices, tc.prec, tc.opts)
			if got, want := many.bytes.Load(), one.bytes.Load(); got != want {
				t.Errorf("opening: %d bytes read over %d devices, %d on one: the globals are read once", got, tc.devices, want)
			}
			var lines []string
			e.opts.Log = func(s string) { lines = append(lines, s) }
			for wave := range 2 {
				before1, beforeN := one.bytes.Load(), many.bytes.Load()
				want, st1, err := single.Run(context.Background(), reqs)
				if err != nil {
					t.Fatal(err)
				}
				got, stN, err := e.Run(context.Background(), reqs)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					for i := range want {
						for j := range want[i] {
							if !reflect.DeepEqual(got[i][j], want[i][j]) {
								t.Errorf("wave %d: request %d sequence %d (%d tokens) differs over %d devices from one", wave, i, j, len(want[i][j].Tokens), tc.devices)
							}
						}
					}
				}
				readN, read1 := many.bytes.Load()-beforeN, one.bytes.Load()-before1
				if readN != read1 {
					t.Errorf("wave %d: %d checkpoint bytes read over %d devices, %d on one", wave, readN, tc.devices, read1)
				}
				if wave == 1 && tc.cached && readN != 0 {
					t.Errorf("wave 1: %d bytes read; want every byte from the host cache", readN)
				}
				if !reflect.DeepEqual(stN.LayerBytes, st1.LayerBytes) || !reflect.DeepEqual(stN.ExpertBytes, st1.ExpertBytes) ||
					!reflect.DeepEqual(stN.ExpertsRead, st1.ExpertsRead) || !reflect.DeepEqual(stN.CachedBytes, st1.CachedBytes) {
					t.Errorf("wave %d: combined stats %+v\nwant one device's %+v", wave, stN, st1)
				}
				if stN.Tokens != st1.Tokens || stN.Sequences != st1.Sequences {
					t.Errorf("wave %d: %d tokens, %d sequences; want %d, %d", wave, stN.Tokens, stN.Sequences, st1.Tokens, st1.Sequences)
				}
				per := e.DeviceStats()
				tokens, busy := 0, 0
				for k, s := range per {
					tokens += s.Tokens
					if s.Tokens > 0 {
						busy++
					}
					for i := range s.ExpertsRead {
						if s.ExpertsRead[i] > stN.ExpertsRead[i] {
							t.Errorf("wave %d: device %d uploaded %d experts of layer %d, more than the %d read", wave, k, s.ExpertsRead[i], i, stN.ExpertsRead[i])
						}
					}
				}
				if tokens != st1.Tokens || busy != min(tc.devices, len(seqs)) {
					t.Errorf("wave %d: the devices ran %d tokens on %d devices; want %d on %d", wave, tokens, busy, st1.Tokens, min(tc.devices, len(seqs)))
				}
			}
			if len(lines) == 0 || !strings.HasPrefix(lines[0], "devices ") || !strings.Contains(lines[0], "in 1 read for all") {
				t.Errorf("the first plan line is %q; want the combined plan", first(lines))
			}
			if !strings.HasPrefix(first(lines[1:]), "device ") {
				t.Errorf("after the combined plan %q; want a device's own plan", first(lines[1:]))
			}
			e.Close()
			for k, b := range bs {
				if b.held != 0 {
					t.Errorf("after Close device %d holds %d bytes of weights", k, b.held)
				}
			}
		})
	}
}

// first is the first line, or "" for none.
func first(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[0]
}

// TestDevicesSpread: the sequences go to the devices by tokens, longest first to the least loaded.
func TestDevicesSpread(t *testing.T) {
	ms := []member{{0, 0, 100}, {0, 1, 10}, {0, 2, 60}, {1, 0, 50}, {1, 1, 40}}
	got := spread(ms, 2)
	// 100 to device 0; 60, then 50 to device 1 (110); 40 to device 0 (140); 10 to device 1 (120)
	want := [][]member{{{0, 0, 100}, {1, 1, 40}}, {{0, 1, 10}, {0, 2, 60}, {1, 0, 50}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spread: got %v, want %v", got, want)
	}
	if got := spread(ms[:1], 3); len(got[0]) != 1 || len(got[1])+len(got[2]) != 0 {
		t.Errorf("one sequence over three devices: %v", got)
	}
}

// TestDevicesSplitWaves: when a device cannot hold its share in one wave (MaxWaveTokens here), the wave
// is halved until each does, with the same results, and a sequence past the bound is refused before any
// compute as on one device.
func TestDevicesSplitWaves(t *testing.T) {
	plan, d := openSynth(t, "tiny", 1)
	seqs := randomSequences(5, 3328, 90, 80, 70, 60, 50, 40)
	req := []Request{{Sequences: seqs, Options: Options{TopK: 3, Hidden: []int{5}}}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req...)
	e, _ := openDevicesEngine(t, plan, d, 2, ops.BF16, EngineOptions{MaxWaveTokens: 100})
	defer e.Close()
	got, st, err := e.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("results of split waves over two devices differ from one device's")
	}
	if st.Tokens != 390 || st.Sequences != 6 {
		t.Errorf("stats of the split waves: %d tokens, %d sequences; want 390, 6", st.Tokens, st.Sequences)
	}
	// planned as Run spreads them: 90, 60, 50 on device 0 and 80, 70, 40 on device 1, three waves of 100 each
	p, err := e.PlanWave([]int{90, 80, 70, 60, 50, 40})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tokens != 390 || p.Sequences != 6 || p.Waves != 3 || p.WaveTokens != 200 || !strings.Contains(p.String(), "over 2 of 2 devices") {
		t.Errorf("PlanWave over two devices: %d tokens, %d sequences, %d waves of %d (%s); want 390, 6, 3 of 200", p.Tokens, p.Sequences, p.Waves, p.WaveTokens, p)
	}
	if p, err := e.PlanWave([]int{90, 10}); err != nil || p.Waves != 1 || p.WaveTokens != 100 {
		t.Errorf("PlanWave of 90 and 10 tokens over two devices: %v, %d waves of %d; want 1 of 100", err, p.Waves, p.WaveTokens)
	}
	_, _, err = e.Run(context.Background(), []Request{{Sequences: randomSequences(1, 3328, 101)}})
	if err == nil || !strings.Contains(err.Error(), "MaxWaveTokens") {
		t.Errorf("a sequence of 101 tokens past MaxWaveTokens 100: err %v", err)
	}
}

// TestDevicesAlike: devices of another precision than the engine's are refused when the engine opens.
func TestDevicesAlike(t *testing.T) {
	plan, d := openSynth(t, "tiny", 1)
	fp32 := &deviceBackend{Backend: cpu.New(cpu.Options{Precision: ops.FP32})}
	first := &deviceBackend{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
	_, err := NewEngine(context.Background(), plan, d, first, EngineOptions{Devices: []ops.Backend{fp32}})
	if err == nil || !strings.Contains(err.Error(), "must be alike") {
		t.Fatalf("an fp32 device beside a bf16 one: err %v", err)
	}
	if first.held != 0 || fp32.held != 0 {
		t.Errorf("after the refusal the backends hold %d and %d bytes", first.held, fp32.held)
	}
}
