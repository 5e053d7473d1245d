package tables

import (
	"strings"
	"testing"
)

// TestSchemaColumns pins every table's column names, types and nullability, spelled as arrow prints them
// (the same spelling pyarrow prints), so that a change to the contract in DESIGN.md fails here first.
func TestSchemaColumns(t *testing.T) {
	const (
		ids  = "list<item: int32, nullable>"
		f32s = "list<item: float32, nullable>"
		strs = "list<item: utf8, nullable>"
	)
	tests := []struct {
		table   string
		float16 bool
		want    []string // "name type" with " null" for a nullable column
	}{
		{TokensTable, false, []string{"seq_id int32", "pos int32", "token_id int32", "token utf8", "message int32",
			"channel utf8", "target_id int32", "logprob float32 null", "rank int32 null", "entropy float32",
			"topk_ids " + ids, "topk_tokens " + strs, "topk_logprobs " + f32s, "conversation utf8", "thinking utf8"}},
		{LensTable, false, []string{"seq_id int32", "pos int32", "layer int32", "entropy float32",
			"target_logprob float32 null", "target_rank int32 null", "topk_ids " + ids, "topk_tokens " + strs,
			"topk_logprobs " + f32s}},
		{HiddenTable, false, []string{"seq_id int32", "pos int32", "layer int32",
			"vector fixed_size_list<item: float32, nullable>[7168]"}},
		{HiddenTable, true, []string{"seq_id int32", "pos int32", "layer int32",
			"vector fixed_size_list<item: float16, nullable>[7168]"}},
		{RouterTable, false, []string{"seq_id int32", "pos int32", "layer int32", "expert_ids " + ids,
			"expert_weights " + f32s}},
		{AttnResTable, false, []string{"seq_id int32", "pos int32", "layer int32", "site utf8", "weights " + f32s}},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			sc, err := Schema(tt.table, 7168, tt.float16, map[string]string{MetaEngine: "v0.1"})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range sc.Fields() {
				s := f.Name + " " + f.Type.String()
				if f.Nullable {
					s += " null"
				}
				got = append(got, s)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("columns:\n-want %q\n+got  %q", tt.want, got)
			}
			wantMeta := map[string]string{MetaTable: tt.table, MetaSchemaVersion: "3", MetaEngine: "v0.1"}
			if got := sc.Metadata().ToMap(); len(got) != len(wantMeta) {
				t.Errorf("metadata: -want %v +got %v", wantMeta, got)
			}
			for k, v := range wantMeta {
				if got := sc.Metadata().ToMap()[k]; got != v {
					t.Errorf("metadata %q: -want %q +got %q", k, v, got)
				}
			}
			if TableName(sc) != tt.table {
				t.Errorf("TableName: -want %q +got %q", tt.table, TableName(sc))
			}
		})
	}
}

// TestSchemaErrors checks the arguments Schema refuses.
func TestSchemaErrors(t *testing.T) {
	tests := []struct {
		name, table string
		dim         int
		meta        map[string]string
		want        string
	}{
		{"unknown table", "logits", 1, nil, `unknown table "logits"`},
		{"reserved table key", TokensTable, 1, map[string]string{MetaTable: "x"}, `"potato.table" is set by this package`},
		{"reserved version key", LensTable, 1, map[string]string{MetaSchemaVersion: "9"}, "potato.schema_version"},
		{"zero dim", HiddenTable, 0, nil, "vector dim 0 out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Schema(tt.table, tt.dim, false, tt.meta)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error: -want containing %q +got %v", tt.want, err)
			}
		})
	}
}

// TestSchemaMetadataOrder checks that metadata keys are sorted, so equal inputs write identical bytes.
func TestSchemaMetadataOrder(t *testing.T) {
	sc, err := Schema(TokensTable, 0, false, map[string]string{"z": "1", "a": "2", MetaBackend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	keys := sc.Metadata().Keys()
	want := []string{"a", MetaBackend, MetaSchemaVersion, MetaTable, "z"}
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Errorf("keys: -want %v +got %v", want, keys)
	}
}
