package cpu

import (
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// mlaQueryBlock is the number of query rows one task handles: tasks are (sequence, head, query block)
// triples, so one long sequence with few heads still spreads over the cores. Each query row is computed
// on its own, so the split never changes a bit.
const mlaQueryBlock = 16

// MLA is causal softmax attention per sequence of l and head h, without positions (K3_SPEC.md 5.3). With
// qk = nope + shared, the query of head h at row t is q[t, h*qk : (h+1)*qk] = [q_nope | q_s], its key at
// row s is [kv[s, h*(nope+vdim) : +nope] ; ks[s, :]] and its value kv[s, h*(nope+vdim)+nope : +vdim].
// In float32, for every row t of a sequence starting at row t0:
//
//	score[s] = (sum_i float32(query[i] * key_s[i])) / float32(sqrt(qk))   // ascending i over the qk dims, s in [t0, t]
//	p = softmax(score)                                                      // as AttnResMix: max shift, ascending sum
//	out[t, h*vdim + j] = rounded(sum_s float32(p[s] * value_s[j]))          // ascending s
//
// Scores are computed four keys at a time (four independent accumulators, as MatMul's row tail), which
// changes nothing in the order of any one score.
func (b *Backend) MLA(q, kv, ks ops.Tensor, heads, nope, shared, vdim int, l ops.Layout) (ops.Tensor, error) {
	began := b.opStart()
	const op = "MLA"
	ts, err := tensors(op, []string{"q", "kv", "ks"}, q, kv, ks)
	if err != nil {
		return nil, err
	}
	qt, kvt, kst := ts[0], ts[1], ts[2]
	if err := ops.CheckMLA(q, kv, ks, heads, nope, shared, vdim, l); err != nil {
		return nil, err
	}
	out := b.mla(qt, kvt, kst, heads, nope, shared, vdim, l, 0)
	if err := b.interrupted(op, began); err != nil {
		return nil, err
	}
	return out, nil
}

// mla computes MLA as documented above over every sequence of l from sequence first on (the rows of
// earlier ones are left zero: MLASlice answers a continued sequence 0 itself, mla_prefix.go).
func (b *Backend) mla(qt, kvt, kst *Tensor, heads, nope, shared, vdim int, l ops.Layout, first int) *Tensor {
	kvw := nope + vdim
	out := newTensor(qt.rows, heads*vdim)
	type task struct{ s, h, t0, t1 int }
	var tasks []task
	for s := first; s < l.Sequences(); s++ {
		for h := range heads {
			for t := l.Starts[s]; t < l.Starts[s+1]; t += mlaQueryBlock {
				tasks = append(tasks, task{s, h, t, min(t+mlaQueryBlock, l.Starts[s+1])})
			}
		}
	}
	b.parallel(len(tasks), func(i int) {
		tk := tasks[i]
		keys := mlaKeys{kv: kvt.data, stride: kvt.cols, off: tk.h * kvw, ks: kst.data, start: l.Starts[tk.s]}
		b.attend(out, qt, keys, tk.h, nope, shared, vdim, tk.t0, tk.t1, 0, make([]float32, tk.t1-keys.start), make([]float32, vdim))
	})
	return out
}

// mlaKeys are the keys and values of one sequence for one head: key row s is
// [kv[s*stride+off : +nope] ; ks[s*shared : +shared]] and its value kv[s*stride+off+nope : +vdim], for
// s from start on.
type mlaKeys struct {
	kv          []float32
	stride, off int
	ks          []float32
	start       int
}

// attend answers the queries of head h at key rows t0..t1-1 as MLA documents, each attending to the
// keys start..t: the query of key row t is row t-qOff of qt and its output row t-qOff of out. score holds
// at least t1-start values and acc vdim; both are scratch.
func (b *Backend) attend(out, qt *Tensor, keys mlaKeys, h, nope, shared, vdim, t0, t1, qOff int, score, acc []float32) {
	qk := nope + shared
	div := float32(math.Sqrt(float64(qk)))
	start := keys.start
	for t := t0; t < t1; t++ {
		if b.halt() { // a query of a long sequence reads every key before it: stop between queries
			return
		}
		qrow := qt.data[(t-qOff)*qt.cols+h*qk:]
		qn, qs := qrow[:nope], qrow[nope:qk]
		p := score[:t-start+1]
		clear(p)
		s := start
		for ; s+4 <= t+1; s += 4 { // four keys at a time: four independent accumulators, same order each
			tile14(p[s-start:], qn, keys.kv[s*keys.stride+keys.off:], keys.stride)
			tile14(p[s-start:], qs, keys.ks[s*shared:], shared)
		}
		for ; s <= t; s++ {
			p[s-start] = dotAcc(dotAcc(0, qn, keys.kv[s*keys.stride+keys.off:]), qs, keys.ks[s*shared:])
		}
		for i := range p {
			p[i] /= div
		}
		softmaxInPlace(p)
		clear(acc)
		for s := start; s <= t; s++ {
			val, ps := keys.kv[s*keys.stride+keys.off+nope:][:vdim], p[s-start]
			for j, x := range val {
				acc[j] += float32(ps * x)
			}
		}
		o := out.data[(t-qOff)*out.cols+h*vdim:][:vdim]
		for j, x := range acc {
			o[j] = b.r(x)
		}
	}
}
