package replay

import (
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// quietCounter is a CPU backend with ops.QuietMixer (by its contract: AttnResMix's mix), counting the
// mixes taken each way. It embeds the concrete backend so that its ops.Slicer stays visible.
type quietCounter struct {
	*cpu.Backend
	loud, quiet int
}

func (q *quietCounter) AttnResMix(vs []ops.Tensor, wg ops.Tensor) (ops.Tensor, []float32, error) {
	q.loud++
	return q.Backend.AttnResMix(vs, wg)
}

func (q *quietCounter) AttnResMixQuiet(vs []ops.Tensor, wg ops.Tensor) (ops.Tensor, error) {
	q.quiet++
	out, _, err := q.Backend.AttnResMix(vs, wg)
	return out, err
}

// TestQuietMixes: on a backend with ops.QuietMixer a replay whose requests ask for no AttnRes weights
// mixes without them (every mix quiet), one that asks for them gets them (every mix with its weights,
// even when another request of the wave does not ask), and either way the results equal a plain
// backend's, sliced or not.
func TestQuietMixes(t *testing.T) {
	seqs := randomSequences(22, 3328, 40, 7, 19)
	quiet := Options{TopK: 4, Lens: []int{1, 3}, Hidden: []int{2}, Router: true}
	loud := quiet
	loud.AttnRes = true
	for _, opts := range []EngineOptions{{}, {SliceTokens: 16}} {
		for _, c := range []struct {
			name      string
			reqs      []Request
			wantQuiet bool
		}{
			{"no request asks for AttnRes", []Request{{Sequences: seqs, Options: quiet}}, true},
			{"one request asks for AttnRes", []Request{{Sequences: seqs[:1], Options: quiet}, {Sequences: seqs[1:], Options: loud}}, false},
		} {
			want := runOne(t, openTiny(t, ops.BF16, opts), c.reqs...)
			q := &quietCounter{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
			got := runOne(t, openPreset(t, "tiny", 1, q, opts), c.reqs...)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("slice tokens %d, %s: results differ from a backend without QuietMixer", opts.SliceTokens, c.name)
			}
			mixes := q.loud + q.quiet
			if mixes == 0 || (c.wantQuiet && q.loud != 0) || (!c.wantQuiet && q.quiet != 0) {
				t.Errorf("slice tokens %d, %s: %d quiet and %d weighed mixes", opts.SliceTokens, c.name, q.quiet, q.loud)
			}
		}
	}
}
