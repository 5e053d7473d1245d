package cuda

import "testing"

// TestExpertScratchBytes: the experts' scratch counts the gathered inputs and SiTU outputs per (row,
// expert) pair and z's bfloat16 copy per row of z, so a pooled call's plan does not count the copy once
// a pair (about 2.3 pairs a row of z in a call of 128 of K3's 896 experts).
func TestExpertScratchBytes(t *testing.T) {
	b := &Backend{}
	const latent, ffn = 3584, 3072
	for _, c := range []struct {
		rows, pairs int
		want        int64
	}{
		{1, 16, 2*16*(latent+ffn) + 2*latent},                     // a token of the per-token plan
		{262144, 599177, 2*599177*(latent+ffn) + 2*262144*latent}, // a pooled call
		{0, 0, 0},
	} {
		if got := b.ExpertScratchBytes(c.rows, c.pairs, latent, ffn); got != c.want {
			t.Errorf("ExpertScratchBytes(%d rows, %d pairs) = %d, want %d", c.rows, c.pairs, got, c.want)
		}
	}
}
