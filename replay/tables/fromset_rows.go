package tables

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The per-table halves of FromSet: each reads one record's payload columns and appends every row's
// payload to the capture gather.rows assigned it.

// addLensRows reads a lens record: entropy, target_logprob, target_rank and the top-k lists (topk_tokens
// only checked, as in FromRecords).
func addLensRows(g *gather, rec arrow.RecordBatch) error {
	caps, err := g.rows(rec, nil)
	if err != nil {
		return err
	}
	entropy, err := float32Column(rec, g.table, "entropy", false)
	if err != nil {
		return err
	}
	logprob, err := float32Column(rec, g.table, "target_logprob", true)
	if err != nil {
		return err
	}
	rank, err := int32Column(rec, g.table, "target_rank", true)
	if err != nil {
		return err
	}
	ids, err := int32ListColumn(rec, g.table, "topk_ids")
	if err != nil {
		return err
	}
	if err := checkPieceLists(rec, g.table, ids); err != nil {
		return err
	}
	logp, err := float32ListColumn(rec, g.table, "topk_logprobs")
	if err != nil {
		return err
	}
	for i, c := range caps {
		st := ops.TokenStats{Entropy: entropy.Value(i), TopIDs: ids.Row(i), TopLogp: logp.Row(i)}
		if logprob.IsValid(i) {
			st.Logprob = logprob.Value(i)
		}
		if rank.IsValid(i) {
			st.Rank = rank.Value(i)
		}
		c.stats = append(c.stats, st)
	}
	return nil
}

// addHiddenRows reads a hidden record's vector column (float32 or float16 elements).
func addHiddenRows(g *gather, rec arrow.RecordBatch) error {
	caps, err := g.rows(rec, nil)
	if err != nil {
		return err
	}
	vec, err := float32ListColumn(rec, g.table, "vector")
	if err != nil {
		return err
	}
	for i, c := range caps {
		c.vals = append(c.vals, vec.Row(i))
	}
	return nil
}

// addRouterRows reads a router record's expert_ids and expert_weights.
func addRouterRows(g *gather, rec arrow.RecordBatch) error {
	caps, err := g.rows(rec, nil)
	if err != nil {
		return err
	}
	ids, err := int32ListColumn(rec, g.table, "expert_ids")
	if err != nil {
		return err
	}
	w, err := float32ListColumn(rec, g.table, "expert_weights")
	if err != nil {
		return err
	}
	for i, c := range caps {
		c.ids = append(c.ids, ids.Row(i))
		c.vals = append(c.vals, w.Row(i))
	}
	return nil
}

// addAttnResRows reads an attnres record's site and weights; the site is part of the capture's key.
func addAttnResRows(g *gather, rec arrow.RecordBatch) error {
	site, err := stringColumn(rec, g.table, "site")
	if err != nil {
		return err
	}
	caps, err := g.rows(rec, site)
	if err != nil {
		return err
	}
	w, err := float32ListColumn(rec, g.table, "weights")
	if err != nil {
		return err
	}
	for i, c := range caps {
		c.vals = append(c.vals, w.Row(i))
	}
	return nil
}
