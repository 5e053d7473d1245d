package job

import (
	"errors"
	"testing"

	"github.com/potato-k3/potato-k3/replay"
)

func items(lens ...int) []Item {
	out := make([]Item, len(lens))
	for i, n := range lens {
		out[i] = Item{ID: string(rune('a' + i)), Seq: i, Sequence: replay.Sequence{Tokens: make([]int32, n)}}
	}
	return out
}

func waveLens(waves [][]Item) [][]int {
	var out [][]int
	for _, w := range waves {
		var l []int
		for _, it := range w {
			l = append(l, len(it.Sequence.Tokens))
		}
		out = append(out, l)
	}
	return out
}

// pack keeps the dataset's order, cuts at the token budget (a longer conversation alone), and cuts again
// where the engine's plan would take more than one read.
func TestPack(t *testing.T) {
	onePass := func(lens []int) (replay.WavePlan, error) { return replay.WavePlan{Waves: 1}, nil }
	got, err := Pack(items(3, 4, 5, 20, 1, 1), 10, onePass)
	if err != nil {
		t.Fatal(err)
	}
	if g, want := waveLens(got), [][]int{{3, 4}, {5}, {20}, {1, 1}}; !equal(g, want) {
		t.Errorf("pack at 10 tokens: %v, want %v", g, want)
	}
	// A plan that holds at most 6 tokens a read splits the wave of 10.
	small := func(lens []int) (replay.WavePlan, error) {
		total := 0
		for _, n := range lens {
			total += n
		}
		if total > 6 {
			return replay.WavePlan{Waves: 2, WaveTokens: 6}, nil
		}
		return replay.WavePlan{Waves: 1}, nil
	}
	got, err = Pack(items(3, 3, 4, 2), 100, small)
	if err != nil {
		t.Fatal(err)
	}
	if g, want := waveLens(got), [][]int{{3, 3}, {4, 2}}; !equal(g, want) {
		t.Errorf("pack under a 6-token plan: %v, want %v", g, want)
	}
	refuse := func([]int) (replay.WavePlan, error) { return replay.WavePlan{}, replay.ErrBudget }
	if _, err := Pack(items(3), 10, refuse); !errors.Is(err, replay.ErrBudget) {
		t.Errorf("pack with a refusing plan: %v", err)
	}
}

func equal(a, b [][]int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}
