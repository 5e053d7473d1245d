package ops

import (
	"errors"
	"fmt"
)

// Sentinels of the shape and argument checks every backend runs before an op (the functions below), so
// that an op refuses the same inputs with the same message on every backend. Backends wrap them.
var (
	// ErrShape marks tensors whose shapes an op cannot combine; the message names the op and the shapes.
	ErrShape = errors.New("ops: bad shape")
	// ErrArgument marks another bad argument (a count, an id out of range).
	ErrArgument = errors.New("ops: bad argument")
)

func shapeErr(op, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrShape, op, fmt.Sprintf(format, args...))
}

func argErr(op, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrArgument, op, fmt.Sprintf(format, args...))
}

// dims renders a tensor's shape as rows x cols.
func dims(t Tensor) string { return fmt.Sprintf("%dx%d", t.Rows(), t.Cols()) }

// CheckLayout verifies that l covers rows 0..rows-1 with sequences in order.
func CheckLayout(op string, l Layout, rows int) error {
	if len(l.Starts) == 0 || l.Starts[0] != 0 || l.Tokens() != rows {
		return shapeErr(op, "layout %v does not cover the %d rows from 0", l.Starts, rows)
	}
	for s := 1; s < len(l.Starts); s++ {
		if l.Starts[s] < l.Starts[s-1] {
			return shapeErr(op, "layout %v: sequence %d ends before it starts", l.Starts, s-1)
		}
	}
	return nil
}

// CheckKDA verifies the shapes of Backend.KDA's arguments: q, k, v, graw rows x channels with channels a
// multiple of heads; braw rows x heads; aLog with at least heads entries; dtBias 1 x channels; l covering
// the rows.
func CheckKDA(q, k, v, graw, braw, aLog, dtBias Tensor, heads int, l Layout) error {
	const op = "KDA"
	rows, ch := q.Rows(), q.Cols()
	if heads <= 0 || ch%heads != 0 {
		return shapeErr(op, "q %s cannot be split into %d heads", dims(q), heads)
	}
	for i, t := range []Tensor{k, v, graw} {
		if t.Rows() != rows || t.Cols() != ch {
			return shapeErr(op, "%s %s differs from q %s", []string{"k", "v", "graw"}[i], dims(t), dims(q))
		}
	}
	switch {
	case braw.Rows() != rows || braw.Cols() != heads:
		return shapeErr(op, "braw %s: want %dx%d", dims(braw), rows, heads)
	case aLog.Rows()*aLog.Cols() < heads:
		return shapeErr(op, "aLog %s has fewer than %d entries", dims(aLog), heads)
	case dtBias.Rows() != 1 || dtBias.Cols() != ch:
		return shapeErr(op, "dtBias %s: want 1x%d", dims(dtBias), ch)
	}
	return CheckLayout(op, l, rows)
}

// CheckMLA verifies the shapes of Backend.MLA's arguments: q rows x heads*(nope+shared), kv rows x
// heads*(nope+vdim), ks rows x shared, l covering the rows.
func CheckMLA(q, kv, ks Tensor, heads, nope, shared, vdim int, l Layout) error {
	if err := checkMLAHeads(q, heads, nope, shared, vdim); err != nil {
		return err
	}
	if rows, kvw := q.Rows(), heads*(nope+vdim); kv.Rows() != rows || kv.Cols() != kvw {
		return shapeErr("MLA", "kv %s: want %dx%d (%d heads x (%d + %d))", dims(kv), rows, kvw, heads, nope, vdim)
	}
	return checkMLAShared(q, ks, shared, l)
}

// CheckMLALatent verifies the shapes of LatentKeys.MLALatent's arguments: q and ks as for MLA, latent
// rows x kvLora and kvb heads*(nope+vdim) x kvLora.
func CheckMLALatent(q, latent, ks, kvb Tensor, heads, nope, shared, vdim int, l Layout) error {
	const op = "MLA"
	if err := checkMLAHeads(q, heads, nope, shared, vdim); err != nil {
		return err
	}
	switch {
	case latent.Rows() != q.Rows() || latent.Cols() == 0:
		return shapeErr(op, "latent %s: want %d rows", dims(latent), q.Rows())
	case kvb.Rows() != heads*(nope+vdim) || kvb.Cols() != latent.Cols():
		return shapeErr(op, "kv_b %s: want %dx%d (%d heads x (%d + %d) by the latent's width)", dims(kvb), heads*(nope+vdim), latent.Cols(), heads, nope, vdim)
	}
	return checkMLAShared(q, ks, shared, l)
}

// checkMLAHeads verifies MLA's head sizes and q's columns, heads*(nope+shared).
func checkMLAHeads(q Tensor, heads, nope, shared, vdim int) error {
	const op = "MLA"
	qk := nope + shared
	switch {
	case heads <= 0 || nope < 0 || shared < 0 || vdim <= 0 || qk == 0:
		return shapeErr(op, "heads %d, nope %d, shared %d, vdim %d", heads, nope, shared, vdim)
	case q.Cols() != heads*qk:
		return shapeErr(op, "q %s: want %d columns (%d heads x (%d + %d))", dims(q), heads*qk, heads, nope, shared)
	}
	return nil
}

// checkMLAShared verifies the shared keys, q's rows x shared, and the layout over q's rows.
func checkMLAShared(q, ks Tensor, shared int, l Layout) error {
	const op = "MLA"
	if rows := q.Rows(); ks.Rows() != rows || ks.Cols() != shared {
		return shapeErr(op, "ks %s: want %dx%d", dims(ks), rows, shared)
	}
	return CheckLayout(op, l, q.Rows())
}

// CheckTokenStats verifies Backend.TokenStats's arguments: h rows x cols against an lm_head of vocab x
// cols, one target per row (negative: none; else below vocab), 0 <= k <= vocab.
func CheckTokenStats(h, w Tensor, targets []int32, k int) error {
	const op = "TokenStats"
	rows, vocab := h.Rows(), w.Rows()
	switch {
	case vocab == 0:
		return shapeErr(op, "lm_head %s has no vocabulary", dims(w))
	case h.Cols() != w.Cols():
		return shapeErr(op, "h %s against lm_head %s: inner sizes differ", dims(h), dims(w))
	case len(targets) != rows:
		return shapeErr(op, "%d targets for %d rows", len(targets), rows)
	case k < 0 || k > vocab:
		return argErr(op, "top k = %d outside 0..%d", k, vocab)
	}
	for r, t := range targets {
		if int(t) >= vocab {
			return argErr(op, "targets[%d] = %d outside the vocabulary of %d", r, t, vocab)
		}
	}
	return nil
}

// CheckRoute verifies Backend.Route's arguments: x rows x cols against a router of experts x cols, bias
// 1 x experts, 1 <= k <= experts.
func CheckRoute(x, w, bias Tensor, k int) error {
	const op = "Route"
	experts := w.Rows()
	switch {
	case x.Cols() != w.Cols():
		return shapeErr(op, "x %s against router %s: inner sizes differ", dims(x), dims(w))
	case bias.Rows() != 1 || bias.Cols() != experts:
		return shapeErr(op, "bias %s: want 1x%d", dims(bias), experts)
	case k < 1 || k > experts:
		return argErr(op, "k = %d outside 1..%d experts", k, experts)
	}
	return nil
}

// CheckExpertsAccumulate verifies Backend.ExpertsAccumulate's arguments other than the experts: acc of
// z's shape, a routing of K ids and weights for each of z's rows, and non-zero SiTU betas.
func CheckExpertsAccumulate(acc, z Tensor, rt Routing, beta, linBeta float32) error {
	const op = "ExpertsAccumulate"
	rows := z.Rows()
	switch {
	case acc.Rows() != rows || acc.Cols() != z.Cols():
		return shapeErr(op, "acc %s differs from z %s", dims(acc), dims(z))
	case rt.K < 0 || len(rt.IDs) != rows*rt.K || len(rt.Weights) != rows*rt.K:
		return shapeErr(op, "routing K %d with %d ids and %d weights for %d rows", rt.K, len(rt.IDs), len(rt.Weights), rows)
	case beta == 0 || linBeta == 0:
		return argErr(op, "beta %g and linBeta %g must be non-zero", beta, linBeta)
	}
	return nil
}

// CheckNorm verifies the arguments of RMSNorm (gate nil) and GatedRMSNorm (op names which): a 1 x g
// weight with g dividing x's columns, and a gate of x's shape.
func CheckNorm(op string, x, w, gate Tensor) error {
	g := w.Cols()
	if w.Rows() != 1 || g == 0 || x.Cols()%g != 0 {
		return shapeErr(op, "x %s with weight %s: want a 1 x g weight with g dividing %d", dims(x), dims(w), x.Cols())
	}
	if gate != nil && (gate.Rows() != x.Rows() || gate.Cols() != x.Cols()) {
		return shapeErr(op, "gate %s differs from x %s", dims(gate), dims(x))
	}
	return nil
}

// CheckAttnResMix verifies Backend.AttnResMix's arguments: at least one vector, all of one shape, and a
// 1 x cols score vector.
func CheckAttnResMix(vs []Tensor, wg Tensor) error {
	const op = "AttnResMix"
	if len(vs) == 0 {
		return shapeErr(op, "no vectors to mix")
	}
	for i, v := range vs {
		if v.Rows() != vs[0].Rows() || v.Cols() != vs[0].Cols() {
			return shapeErr(op, "vs[%d] %s differs from vs[0] %s", i, dims(v), dims(vs[0]))
		}
	}
	if wg.Rows() != 1 || wg.Cols() != vs[0].Cols() {
		return shapeErr(op, "wg %s: want 1x%d", dims(wg), vs[0].Cols())
	}
	return nil
}
