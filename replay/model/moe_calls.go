package model

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Expert calls of a planned size. ExpertsAccumulate takes scratch for every (row, expert) pair of its
// call (the gathered latent inputs and SiTU outputs: ops.ExpertScratch), and a row brings all top-k of
// its pairs to a call only when every expert it chose is in the call: a chunk of 128 of K3's 896 experts
// meets 2.3 of a token's 16 on average. Planned for all 16 (215 KiB a token at K3's size, about a third of
// what the plan counted a token of a slice), an 80 GB card kept the state of a 262,144-token wave in host
// memory where the device peaked at 48 GB (runs 130-131). So the plan counts CallPairs pairs a row, and a
// call whose experts bring more is cut into calls on consecutive runs of them, ascending: the same sums as
// one call, by ExpertsAccumulate's contract. A row meets an expert at most once, so a run of one expert
// always fits.

// CallPairs is the (row, expert) pairs a row brings to one expert call at most, as the plan counts the
// call's scratch: a quarter of the top-k, at least one (K3: 4 of 16, 1.75 times what a chunk of 128
// experts meets on average, so that only a chunk routed far above the average is cut).
func (m *Model) CallPairs() int { return max(1, m.Dims.TopK/4) }

// pairCounts is how many (row, expert) pairs of r each expert has, by id (negative ids skipped).
func pairCounts(r ops.Routing) []int {
	var n []int
	for _, id := range r.IDs {
		if id < 0 {
			continue
		}
		if int(id) >= len(n) {
			n = append(n, make([]int, int(id)+1-len(n))...)
		}
		n[id]++
	}
	return n
}

// callMost is the most (row, expert) pairs one expert call over rows rows takes (-1: no bound).
func (f *Pass) callMost(rows int) int {
	if f.CallPairs <= 0 {
		return -1
	}
	return f.CallPairs * rows
}

// callRuns cuts ids (ascending; pairs[id] the pairs of expert id, ids past pairs having none) into
// consecutive runs of at most most pairs each (most < 0: one run), an expert with more than most being a
// run alone. It returns where each run ends: run i is ids[ends[i-1]:ends[i]], the first from 0. No ids: no
// runs.
func callRuns(ids, pairs []int, most int) []int {
	if len(ids) == 0 {
		return nil
	}
	if most < 0 {
		return []int{len(ids)}
	}
	var ends []int
	start, sum := 0, 0
	for i, id := range ids {
		n := 0
		if id < len(pairs) {
			n = pairs[id]
		}
		if i > start && sum+n > most {
			ends = append(ends, i)
			start, sum = i, 0
		}
		sum += n
	}
	return append(ends, len(ids))
}

// callCount is how many expert calls the chunks of ids (chunk at a time, all at once when chunk <= 0)
// take over rows rows.
func (f *Pass) callCount(ids, pairs []int, chunk, rows int) int {
	if chunk <= 0 {
		chunk = max(len(ids), 1)
	}
	n := 0
	for start := 0; start < len(ids); start += chunk {
		n += len(callRuns(ids[start:min(start+chunk, len(ids))], pairs, f.callMost(rows)))
	}
	return n
}

// expertCalls is ExpertsAccumulate of experts (those of ids, ascending, one for one; pairs[id] the pairs
// of expert id in r) into acc over z, in as many calls as keep each within f.callMost(z.Rows()) pairs.
func (f *Pass) expertCalls(acc, z ops.Tensor, r ops.Routing, ids []int, experts []ops.Expert, pairs []int, beta, linBeta float32) error {
	if len(ids) != len(experts) {
		return fmt.Errorf("%d experts for ids %v", len(experts), ids)
	}
	ends := callRuns(ids, pairs, f.callMost(z.Rows()))
	start := 0
	for _, end := range ends {
		if err := f.Model.Ops.ExpertsAccumulate(acc, z, r, experts[start:end], beta, linBeta); err != nil {
			if len(ends) > 1 {
				return fmt.Errorf("the call on experts %v of them: %w", ids[start:end], err)
			}
			return err
		}
		start = end
	}
	return nil
}
