package tables

import (
	"errors"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// handResults is a result written out by hand, so that TestBuildCells can name the cell each value must
// land in without going through FromSet (a bug symmetric in Build and FromSet would pass a round trip).
func handResults() []replay.Result {
	return []replay.Result{{
		SeqID:    11,
		Tokens:   []int32{100, 200, 300},
		Pieces:   []string{"a", "b", "c"},
		Messages: []int32{0, 0, 1},
		Channels: []string{"user", "user", "response"},
		Targets:  []int32{200, 300, -1},
		Stats: []ops.TokenStats{
			{Logprob: -0.5, Rank: 1, Entropy: 1.25, TopIDs: []int32{200, 7}, TopLogp: []float32{-0.5, -2}},
			{Logprob: -3, Rank: 4, Entropy: 2.5},
			{Logprob: 9, Rank: 9, Entropy: 0.75, TopIDs: []int32{5}, TopLogp: []float32{-0.1}},
		},
		Lens: []replay.LayerStats{{Layer: 6, Stats: []ops.TokenStats{
			{Logprob: -1, Rank: 2, Entropy: 3}, {Logprob: -2, Rank: 3, Entropy: 4}, {Logprob: 1, Rank: 1, Entropy: 5},
		}}},
		Hidden: []replay.LayerVectors{{Layer: 6, Dim: 2, Values: []float32{1, 2, 3, 4, 5, 6}}},
		Router: []replay.LayerRouting{{Layer: 8, K: 2, IDs: []int32{1, 2, 3, 4, 5, 6}, Weights: []float32{.1, .2, .3, .4, .5, .6}}},
		Mixes:  []replay.Mix{{Layer: 9, Site: "output", N: 1, Weights: []float32{1, 1, 0.5}}},
	}}
}

// handPiece names ids for the topk_tokens columns, as a tokenizer's Piece would.
func handPiece(id int32) string { return fmt.Sprintf("p%d", id) }

// TestBuildCells checks chosen cells of every table by column name.
func TestBuildCells(t *testing.T) {
	mem := checkedAlloc(t)
	set, err := Build(handResults(), Options{Allocator: mem, Piece: handPiece})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	tests := []struct {
		table, column string
		row           int
		want          string // arrow's ValueStr
	}{
		{TokensTable, "seq_id", 2, "11"},
		{TokensTable, "pos", 2, "2"},
		{TokensTable, "token_id", 1, "200"},
		{TokensTable, "token", 2, "c"},
		{TokensTable, "message", 2, "1"},
		{TokensTable, "channel", 0, "user"},
		{TokensTable, "target_id", 2, "-1"},
		{TokensTable, "logprob", 1, "-3"},
		{TokensTable, "logprob", 2, array.NullValueStr},
		{TokensTable, "rank", 0, "1"},
		{TokensTable, "rank", 2, array.NullValueStr},
		{TokensTable, "entropy", 2, "0.75"},
		{TokensTable, "topk_ids", 0, "[200,7]"},
		{TokensTable, "topk_ids", 1, "[]"},
		{TokensTable, "topk_tokens", 0, `["p200","p7"]`},
		{TokensTable, "topk_tokens", 1, "[]"},
		{TokensTable, "topk_tokens", 2, `["p5"]`},
		{TokensTable, "topk_logprobs", 0, "[-0.5,-2]"},
		{LensTable, "layer", 0, "6"},
		{LensTable, "entropy", 1, "4"},
		{LensTable, "target_logprob", 0, "-1"},
		{LensTable, "target_logprob", 2, array.NullValueStr},
		{LensTable, "target_rank", 1, "3"},
		{LensTable, "target_rank", 2, array.NullValueStr},
		{LensTable, "topk_ids", 2, "[]"},
		{LensTable, "topk_tokens", 2, "[]"},
		{HiddenTable, "layer", 1, "6"},
		{HiddenTable, "vector", 1, "[3,4]"},
		{RouterTable, "layer", 0, "8"},
		{RouterTable, "expert_ids", 2, "[5,6]"},
		{RouterTable, "expert_weights", 1, "[0.3,0.4]"},
		{AttnResTable, "site", 2, "output"},
		{AttnResTable, "layer", 2, "9"},
		{AttnResTable, "weights", 2, "[0.5]"},
	}
	for _, tt := range tests {
		tab := set.Table(tt.table)
		if tab == nil || len(tab.Records) != 1 {
			t.Fatalf("table %s: want one record, got %v", tt.table, tab)
		}
		col, err := findColumn(tab.Records[0], tt.table, tt.column)
		if err != nil {
			t.Fatal(err)
		}
		if got := col.ValueStr(tt.row); got != tt.want {
			t.Errorf("%s.%s row %d: -want %s +got %s", tt.table, tt.column, tt.row, tt.want, got)
		}
	}
}

// TestBuildNoPiece checks that without Options.Piece (an engine with no tokenizer) every topk_tokens list
// is empty, not null, while topk_ids is filled.
func TestBuildNoPiece(t *testing.T) {
	in := handResults()
	in[0].Lens[0].Stats[1].TopIDs, in[0].Lens[0].Stats[1].TopLogp = []int32{3}, []float32{-1}
	set, err := Build(in, Options{Allocator: checkedAlloc(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	for _, tt := range []struct {
		table string
		row   int
		ids   string
	}{{TokensTable, 0, "[200,7]"}, {LensTable, 1, "[3]"}} {
		rec := set.Table(tt.table).Records[0]
		ids, err1 := findColumn(rec, tt.table, "topk_ids")
		pieces, err2 := findColumn(rec, tt.table, "topk_tokens")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if ids.ValueStr(tt.row) != tt.ids || pieces.NullN() != 0 || pieces.ValueStr(tt.row) != "[]" {
			t.Errorf("%s row %d: topk_ids %s (want %s), topk_tokens %s with %d nulls (want [] and none)",
				tt.table, tt.row, ids.ValueStr(tt.row), tt.ids, pieces.ValueStr(tt.row), pieces.NullN())
		}
	}
}

// TestBuildBatches checks the batch bound: every batch but the last has exactly BatchRows rows, and the
// batches together equal the table built in one batch.
func TestBuildBatches(t *testing.T) {
	in := makeResults(2, 3, spec{seq: 1, tokens: 5}, spec{seq: 2, tokens: 0}, spec{seq: 3, tokens: 8, conv: true})
	mem := checkedAlloc(t)
	whole, err := Build(in, Options{Allocator: mem, Piece: handPiece})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Release()
	for _, rows := range []int{1, 3, 5, 13, 100} {
		split, err := Build(in, Options{Allocator: mem, BatchRows: rows, Piece: handPiece})
		if err != nil {
			t.Fatal(err)
		}
		for _, tab := range split.Tables() {
			for i, rec := range tab.Records {
				if last := i == len(tab.Records)-1; rec.NumRows() > int64(rows) || !last && rec.NumRows() != int64(rows) {
					t.Errorf("BatchRows %d: %s batch %d of %d has %d rows", rows, tab.Name, i, len(tab.Records), rec.NumRows())
				}
			}
			a, b := whole.Table(tab.Name).ArrowTable(), tab.ArrowTable()
			if !array.TableEqual(a, b) {
				t.Errorf("BatchRows %d: %s differs from the table built in one batch", rows, tab.Name)
			}
			a.Release()
			b.Release()
		}
		split.Release()
	}
}

// TestHiddenBatchBytes checks that hidden batches stay under 64 MiB of vectors whatever BatchRows says.
func TestHiddenBatchBytes(t *testing.T) {
	const dim = 1 << 16 // 256 KiB a row in float32: 256 rows a batch
	in := []replay.Result{{SeqID: 1, Tokens: make([]int32, 300), Targets: make([]int32, 300), Stats: make([]ops.TokenStats, 300),
		Hidden: []replay.LayerVectors{{Layer: 0, Dim: dim, Values: make([]float32, 300*dim)}}}}
	for _, tt := range []struct {
		float16 bool
		want    []int64
	}{{false, []int64{256, 44}}, {true, []int64{300}}} {
		rr, err := NewReader(in, HiddenTable, Options{HiddenFloat16: tt.float16})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for rr.Next() {
			got = append(got, rr.RecordBatch().NumRows())
		}
		rr.Release()
		if len(got) != len(tt.want) || got[0] != tt.want[0] {
			t.Errorf("float16 %v: batch rows -want %v +got %v", tt.float16, tt.want, got)
		}
	}
}

// TestCaptured checks that a table is present exactly when some result carries its output.
func TestCaptured(t *testing.T) {
	in := handResults()
	in[0].Hidden, in[0].Mixes = nil, nil
	set, err := Build(in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	var got []string
	for _, tab := range set.Tables() {
		got = append(got, tab.Name)
	}
	want := []string{TokensTable, LensTable, RouterTable}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("tables: -want %v +got %v", want, got)
	}
	if set.Hidden != nil || set.AttnRes != nil {
		t.Errorf("hidden %v and attnres %v should be nil", set.Hidden, set.AttnRes)
	}
	if _, err := NewReader(in, HiddenTable, Options{}); !errors.Is(err, ErrNotCaptured) {
		t.Errorf("NewReader(hidden): -want ErrNotCaptured +got %v", err)
	}
	if _, err := NewReader(in, "logits", Options{}); err == nil {
		t.Error("NewReader accepted an unknown table")
	}

	empty, err := Build(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Release()
	if empty.Tokens == nil || empty.Tokens.NumRows() != 0 || len(empty.Tables()) != 1 {
		t.Errorf("Build(nil): want an empty tokens table only, got %v", empty.Tables())
	}
}

// TestReaderStreams checks that NewReader's batches are Build's, and that a batch stays valid until Next.
func TestReaderStreams(t *testing.T) {
	in := makeResults(4, 2, spec{seq: 1, tokens: 7, conv: true})
	mem := checkedAlloc(t)
	set, err := Build(in, Options{Allocator: mem, BatchRows: 3, Piece: handPiece})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	for _, name := range TableNames {
		rr, err := NewReader(in, name, Options{Allocator: mem, BatchRows: 3, Piece: handPiece})
		if err != nil {
			t.Fatal(err)
		}
		var recs []arrow.RecordBatch
		for rr.Next() {
			recs = append(recs, rr.RecordBatch())
			if !array.RecordEqual(recs[len(recs)-1], set.Table(name).Records[len(recs)-1]) {
				t.Errorf("%s batch %d differs from Build's", name, len(recs)-1)
			}
		}
		if rr.Err() != nil || len(recs) != len(set.Table(name).Records) {
			t.Errorf("%s: %d batches (err %v), want %d", name, len(recs), rr.Err(), len(set.Table(name).Records))
		}
		rr.Release()
	}
}
