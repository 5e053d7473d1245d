package replay

import (
	"context"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// BenchmarkReplay times one wave through the tiny and small presets on the CPU backend and reports
// tokens/s and the weight bytes read per pass (potato bench reports the same as ratios to the bound).
func BenchmarkReplay(b *testing.B) {
	for _, c := range []struct {
		preset string
		vocab  int
		tokens []int
	}{
		{"tiny", 3328, []int{128, 128}},
		{"small", 33024, []int{256, 256}},
	} {
		b.Run(c.preset, func(b *testing.B) {
			e := openPreset(b, c.preset, 1, cpu.New(cpu.Options{Precision: ops.BF16}), EngineOptions{})
			req := Request{Sequences: randomSequences(1, c.vocab, c.tokens...)}
			var st WaveStats
			b.ResetTimer()
			for b.Loop() {
				var err error
				if _, st, err = e.Run(context.Background(), []Request{req}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(st.Tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(st.BytesRead()), "bytes/pass")
		})
	}
}
