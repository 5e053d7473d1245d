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
	const op = "MLA"
	ts, err := tensors(op, []string{"q", "kv", "ks"}, q, kv, ks)
	if err != nil {
		return nil, err
	}
	qt, kvt, kst := ts[0], ts[1], ts[2]
	if err := ops.CheckMLA(q, kv, ks, heads, nope, shared, vdim, l); err != nil {
		return nil, err
	}
	return b.mla(qt, kvt, kst, heads, nope, shared, vdim, l, 0), nil
}

// mla computes MLA as documented above for the query rows qOff.. of a layout over the key rows: q row i is
// the query of key row qOff + i (the rows before qOff are an earlier slice's keys of sequence 0, whose
// queries were answered then). The output has q's rows.
func (b *Backend) mla(qt, kvt, kst *Tensor, heads, nope, shared, vdim int, l ops.Layout, qOff int) *Tensor {
	qk, kvw := nope+shared, nope+vdim
	div := float32(math.Sqrt(float64(qk)))
	out := newTensor(qt.rows, heads*vdim)
	type task struct{ s, h, t0, t1 int }
	var tasks []task
	for s := range l.Sequences() {
		for h := range heads {
			for t := max(l.Starts[s], qOff); t < l.Starts[s+1]; t += mlaQueryBlock {
				tasks = append(tasks, task{s, h, t, min(t+mlaQueryBlock, l.Starts[s+1])})
			}
		}
	}
	b.parallel(len(tasks), func(i int) {
		tk := tasks[i]
		start := l.Starts[tk.s]
		score := make([]float32, tk.t1-start)
		acc := make([]float32, vdim)
		for t := tk.t0; t < tk.t1; t++ {
			qrow := qt.data[(t-qOff)*qt.cols+tk.h*qk:]
			qn, qs := qrow[:nope], qrow[nope:qk]
			p := score[:t-start+1]
			clear(p)
			s := start
			for ; s+4 <= t+1; s += 4 { // four keys at a time: four independent accumulators, same order each
				tile14(p[s-start:], qn, kvt.data[s*kvt.cols+tk.h*kvw:], kvt.cols)
				tile14(p[s-start:], qs, kst.data[s*shared:], shared)
			}
			for ; s <= t; s++ {
				p[s-start] = dotAcc(dotAcc(0, qn, kvt.data[s*kvt.cols+tk.h*kvw:]), qs, kst.data[s*shared:])
			}
			for i := range p {
				p[i] /= div
			}
			softmaxInPlace(p)
			clear(acc)
			for s := start; s <= t; s++ {
				val, ps := kvt.data[s*kvt.cols+tk.h*kvw+nope:][:vdim], p[s-start]
				for j, x := range val {
					acc[j] += float32(ps * x)
				}
			}
			o := out.data[(t-qOff)*out.cols+tk.h*vdim:][:vdim]
			for j, x := range acc {
				o[j] = b.r(x)
			}
		}
	})
	return out
}
