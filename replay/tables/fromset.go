package tables

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// FromSet turns a whole Set back into results: the tokens table as FromRecords does, then every lens,
// hidden, router and attnres row attached to its sequence. Captures come in order of first appearance, so a
// Set from Build gives back the captures in their original order. float16 vectors are widened to float32
// exactly; a null target_logprob or target_rank becomes 0; a capture of a sequence with no tokens has no
// rows and so does not come back. Every capture must cover each position of its sequence exactly once and
// have one list width (K, N, dim) at all its positions.
func FromSet(s *Set) ([]replay.Result, error) {
	if s == nil || s.Tokens == nil {
		return nil, fmt.Errorf("tables: FromSet: the set has no tokens table (it gives the sequences)")
	}
	results, err := FromRecords(s.Tokens.Records...)
	if err != nil {
		return nil, err
	}
	seqs := make(map[int32]*replay.Result, len(results))
	for i := range results {
		seqs[results[i].SeqID] = &results[i]
	}
	for _, step := range []struct {
		name string // the slot's name, not Table.Name: a table read from another tool's file may have none
		t    *Table
		add  func(g *gather, rec arrow.RecordBatch) error
	}{
		{LensTable, s.Lens, addLensRows}, {HiddenTable, s.Hidden, addHiddenRows},
		{RouterTable, s.Router, addRouterRows}, {AttnResTable, s.AttnRes, addAttnResRows},
	} {
		if step.t == nil {
			continue
		}
		g := &gather{table: step.name, seqs: seqs, index: map[captureKey]*capture{}}
		for b, rec := range step.t.Records {
			if err := step.add(g, rec); err != nil {
				return nil, fmt.Errorf("%w (record %d)", err, b)
			}
		}
		// A capture's rows may be spread over several records: order them once all are in.
		if err := g.finish(); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// captureKey identifies one capture: a sequence's layer, and for attnres the site.
type captureKey struct {
	seq   int32
	layer int32
	site  string
}

// capture gathers the rows of one capture in the order read; only the fields of its table are used.
type capture struct {
	captureKey
	res   *replay.Result
	pos   []int32
	stats []ops.TokenStats // lens
	ids   [][]int32        // router expert ids
	vals  [][]float32      // hidden vectors, router weights, attnres weights
}

// gather collects one table's captures, in order of first appearance.
type gather struct {
	table string
	seqs  map[int32]*replay.Result
	order []*capture
	index map[captureKey]*capture
}

// rows reads the key columns of rec and returns, per row, the capture it belongs to (site: the site
// column's values for attnres, nil otherwise), having appended the row's position to it.
func (g *gather) rows(rec arrow.RecordBatch, site stringArray) ([]*capture, error) {
	seq, err := int32Column(rec, g.table, "seq_id", false)
	if err != nil {
		return nil, err
	}
	pos, err := int32Column(rec, g.table, "pos", false)
	if err != nil {
		return nil, err
	}
	layer, err := int32Column(rec, g.table, "layer", false)
	if err != nil {
		return nil, err
	}
	caps := make([]*capture, rec.NumRows())
	for i := range caps {
		key := captureKey{seq: seq.Value(i), layer: layer.Value(i)}
		if site != nil {
			key.site = site.Value(i)
		}
		c := g.index[key]
		if c == nil {
			res := g.seqs[key.seq]
			if res == nil {
				return nil, fmt.Errorf("tables: %s: row %d: sequence %d is not in the tokens table", g.table, i, key.seq)
			}
			c = &capture{captureKey: key, res: res}
			g.index[key] = c
			g.order = append(g.order, c)
		}
		c.pos = append(c.pos, pos.Value(i))
		caps[i] = c
	}
	return caps, nil
}

// finish puts every capture's rows in position order and appends the capture to its result.
func (g *gather) finish() error {
	for _, c := range g.order {
		where := fmt.Sprintf("tables: %s: sequence %d, layer %d", g.table, c.seq, c.layer)
		if c.site != "" {
			where += ", site " + c.site
		}
		if len(c.pos) != len(c.res.Tokens) {
			return fmt.Errorf("%s: %d rows, want %d (one per token)", where, len(c.pos), len(c.res.Tokens))
		}
		perm, err := positionOrder(c.pos)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if perm != nil {
			c.stats, c.ids, c.vals = permute(c.stats, perm), permute(c.ids, perm), permute(c.vals, perm)
		}
		if err := g.attach(c); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}

// attach appends c, in position order, to its result as the Result type of g's table.
func (g *gather) attach(c *capture) error {
	r, layer := c.res, int(c.layer)
	switch g.table {
	case LensTable:
		r.Lens = append(r.Lens, replay.LayerStats{Layer: layer, Stats: c.stats})
	case HiddenTable:
		dim, flat, err := flatten(c.vals)
		if err != nil {
			return fmt.Errorf("vector: %w", err)
		}
		r.Hidden = append(r.Hidden, replay.LayerVectors{Layer: layer, Dim: dim, Values: flat})
	case RouterTable:
		k, ids, err := flatten(c.ids)
		if err != nil {
			return fmt.Errorf("expert_ids: %w", err)
		}
		kw, w, err := flatten(c.vals)
		if err != nil {
			return fmt.Errorf("expert_weights: %w", err)
		}
		if kw != k && len(c.ids) > 0 {
			return fmt.Errorf("expert_weights: %d per position where expert_ids has %d", kw, k)
		}
		r.Router = append(r.Router, replay.LayerRouting{Layer: layer, K: k, IDs: ids, Weights: w})
	case AttnResTable:
		n, w, err := flatten(c.vals)
		if err != nil {
			return fmt.Errorf("weights: %w", err)
		}
		r.Mixes = append(r.Mixes, replay.Mix{Layer: layer, Site: c.site, N: n, Weights: w})
	}
	return nil
}

// flatten concatenates rows of one width into a row-major matrix and returns the width.
func flatten[T any](rows [][]T) (int, []T, error) {
	if len(rows) == 0 {
		return 0, nil, nil
	}
	width := len(rows[0])
	flat := make([]T, 0, width*len(rows))
	for t, row := range rows {
		if len(row) != width {
			return 0, nil, fmt.Errorf("%d values at position %d, %d at position 0", len(row), t, width)
		}
		flat = append(flat, row...)
	}
	return width, flat, nil
}
