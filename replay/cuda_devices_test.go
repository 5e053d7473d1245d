package replay

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestCUDADevices checks the orchestration of several GPUs on one (`--devices 0,0` and `0,0,0`): two or
// three CUDA backends opened on device 0, each with its own thread, streams and host registry, run a
// wave's sequences between them, fed by one reader, and every sequence gets the bits one CUDA backend
// gives it, in every table, in both precisions (bf16 on the tensor cores and on the CUDA cores), sliced
// and in expert chunks, and from the host cache; the checkpoint's bytes are read once (as many as one
// backend reads) and the combined stats equal one backend's. GPU machines only (skips without CUDA):
//
//	go test ./replay -run 'TestCUDADevices' -v
func TestCUDADevices(t *testing.T) {
	presets := []struct {
		name    string
		vocab   int
		lengths []int
	}{
		{"tiny", 3328, []int{64, 64, 33, 7, 128, 1, 200}},
		{"small", 33024, []int{64, 96, 17, 130}},
	}
	opts := Options{TopK: 5, Hidden: []int{0, 2}, Lens: []int{1, 3}, Router: true, AttnRes: true}
	for _, p := range presets {
		dir := synthModel(t, p.name, 1)
		plan, err := model.ReadFile(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name    string
			devices int
			o       cuda.Options
			eo      EngineOptions
			waves   int
		}{
			{"bf16, 2 on device 0", 2, cuda.Options{Precision: ops.BF16}, EngineOptions{}, 1},
			{"bf16 on the CUDA cores, 2 on device 0", 2, cuda.Options{Precision: ops.BF16, NoTensorCores: true}, EngineOptions{}, 1},
			{"fp32, 2 on device 0", 2, cuda.Options{Precision: ops.FP32}, EngineOptions{}, 1},
			{"bf16, 3 on device 0, slices of 64, chunks of 3", 3, cuda.Options{Precision: ops.BF16}, EngineOptions{SliceTokens: 64, ExpertChunk: 3}, 1},
			{"bf16, 2 on device 0, host cache", 2, cuda.Options{Precision: ops.BF16}, EngineOptions{HostCacheBytes: 4 << 30}, 2},
			{"bf16, 2 on device 0, host cache, experts fetched ahead", 2, cuda.Options{Precision: ops.BF16}, EngineOptions{HostCacheBytes: 4 << 30, PrefetchExperts: -1}, 2},
		} {
			t.Run(p.name+", "+tc.name, func(t *testing.T) {
				d, err := checkpoint.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				one, many := &countingReader{Dir: d}, &countingReader{Dir: d}
				single, err := NewEngine(context.Background(), plan, one, newCUDA(t, tc.o), tc.eo)
				if err != nil {
					t.Fatal(err)
				}
				defer single.Close()
				eo := tc.eo
				eo.DeviceMemory = 8 << 30 // each of the backends' share of the card
				first := newCUDA(t, tc.o)
				for range tc.devices - 1 {
					eo.Devices = append(eo.Devices, newCUDA(t, tc.o))
				}
				var lines []string
				eo.Log = func(s string) { lines = append(lines, s) }
				e, err := NewEngine(context.Background(), plan, many, first, eo)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				req := []Request{{Sequences: randomSequences(11, p.vocab, p.lengths...), Options: opts}}
				for wave := range tc.waves {
					b1, bN := one.bytes.Load(), many.bytes.Load()
					want, st1, err := single.Run(context.Background(), req)
					if err != nil {
						t.Fatal(err)
					}
					got, stN, err := e.Run(context.Background(), req)
					if err != nil {
						t.Fatal(err)
					}
					same := 0
					for j := range want[0] {
						if reflect.DeepEqual(got[0][j], want[0][j]) {
							same++
						} else {
							t.Errorf("wave %d: sequence %d (%d tokens) differs over %d backends from one", wave, j, len(want[0][j].Tokens), tc.devices)
						}
					}
					read1, readN := one.bytes.Load()-b1, many.bytes.Load()-bN
					t.Logf("wave %d: %d of %d sequences bit-identical; checkpoint bytes read: %d over %d backends, %d on one; %.3fs vs %.3fs on one",
						wave, same, len(want[0]), readN, tc.devices, read1, stN.Seconds, st1.Seconds)
					for k, s := range e.DeviceStats() {
						t.Logf("wave %d: backend %d ran %d sequences, %d tokens, uploaded %d bytes (%d from the host cache)", wave, k, s.Sequences, s.Tokens, s.BytesRead(), sum(s.CachedBytes))
					}
					if readN != read1 {
						t.Errorf("wave %d: %d bytes read over %d backends, %d on one: want each byte read once", wave, readN, tc.devices, read1)
					}
					// (fetched ahead of the router, a device's share may choose too few experts for it where the whole wave does not)
					if tc.eo.PrefetchExperts == 0 && (stN.BytesRead() != st1.BytesRead() || !reflect.DeepEqual(stN.ExpertsRead, st1.ExpertsRead)) {
						t.Errorf("wave %d: combined stats %d bytes, experts %v; one backend %d, %v", wave, stN.BytesRead(), stN.ExpertsRead, st1.BytesRead(), st1.ExpertsRead)
					}
				}
				if len(lines) < 2 || !strings.HasPrefix(lines[0], "devices ") {
					t.Errorf("plan lines %q: want the combined plan, then each backend's", lines)
				}
			})
		}
	}
}
