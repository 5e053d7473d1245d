package datasets

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestNewKey(t *testing.T) {
	type req struct {
		Layers []int          `json:"layers"`
		Opts   map[string]any `json:"opts"`
	}
	base, err := NewKey("cfg", "v1", req{Layers: []int{1, 2}, Opts: map[string]any{"a": 1, "b": "<x>"}})
	if err != nil {
		t.Fatal(err)
	}
	same := []any{
		json.RawMessage(`{"opts": {"b": "<x>", "a": 1}, "layers": [1, 2]}`), // other key order and spacing
		map[string]any{"layers": []int{1, 2}, "opts": map[string]any{"b": "<x>", "a": 1}},
	}
	for i, r := range same {
		k, err := NewKey("cfg", "v1", r)
		if err != nil || k != base {
			t.Errorf("same request %d: key %s, err %v; want %s", i, k, err, base)
		}
	}
	differ := []struct {
		name        string
		cfg, engine string
		req         any
	}{
		{"model", "cfg2", "v1", req{Layers: []int{1, 2}, Opts: map[string]any{"a": 1, "b": "<x>"}}},
		{"engine", "cfg", "v2", req{Layers: []int{1, 2}, Opts: map[string]any{"a": 1, "b": "<x>"}}},
		{"request", "cfg", "v1", req{Layers: []int{2, 1}, Opts: map[string]any{"a": 1, "b": "<x>"}}},
		{"boundary", "cf", "gv1", req{Layers: []int{1, 2}, Opts: map[string]any{"a": 1, "b": "<x>"}}},
	}
	for _, tt := range differ {
		if k, _ := NewKey(tt.cfg, tt.engine, tt.req); k == base {
			t.Errorf("%s changed but the key did not", tt.name)
		}
	}
	if _, err := NewKey("cfg", "v1", func() {}); err == nil {
		t.Errorf("a request that cannot be marshalled: want an error")
	}
	if s := base.String(); len(s) != 64 {
		t.Errorf("String: %q, want 64 hex digits", s)
	}
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{json.RawMessage(`{ "b" : 1, "a" : [ true , null ] }`), `{"a":[true,null],"b":1}`},
		{json.RawMessage(`{"id": 12345678901234567890123}`), `{"id":12345678901234567890123}`},
		{map[string]string{"html": "<a&b>"}, `{"html":"<a&b>"}`},
	}
	for _, tt := range tests {
		got, err := CanonicalJSON(tt.in)
		if err != nil || string(got) != tt.want {
			t.Errorf("CanonicalJSON(%v): want %s, got %s (%v)", tt.in, tt.want, got, err)
		}
	}
}

// resultTables builds a tokens table and a hidden table in two batches, with the types the engine
// writes that Parquet has no exact match for (int32, float16 fixed-size vectors, nullable floats).
func resultTables(t *testing.T, mem memory.Allocator) Tables {
	t.Helper()
	tokens := arrow.NewSchema([]arrow.Field{
		{Name: "pos", Type: arrow.PrimitiveTypes.Int32},
		{Name: "token", Type: arrow.BinaryTypes.String},
		{Name: "logprob", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "topk_ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}, nil)
	hidden := arrow.NewSchema([]arrow.Field{
		{Name: "pos", Type: arrow.PrimitiveTypes.Int32},
		{Name: "vector", Type: arrow.FixedSizeListOf(4, arrow.FixedWidthTypes.Float16)},
	}, nil)
	out := Tables{}
	for batch := 0; batch < 2; batch++ {
		tb := array.NewRecordBuilder(mem, tokens)
		hb := array.NewRecordBuilder(mem, hidden)
		for i := 0; i < 3; i++ {
			p := int32(batch*3 + i)
			tb.Field(0).(*array.Int32Builder).Append(p)
			tb.Field(1).(*array.StringBuilder).Append(string(rune('a' + p)))
			if p == 5 {
				tb.Field(2).(*array.Float32Builder).AppendNull()
			} else {
				tb.Field(2).(*array.Float32Builder).Append(-float32(p) / 2)
			}
			lb := tb.Field(3).(*array.ListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{p, p + 1}, nil)
			hb.Field(0).(*array.Int32Builder).Append(p)
			fl := hb.Field(1).(*array.FixedSizeListBuilder)
			fl.Append(true)
			for k := 0; k < 4; k++ {
				fl.ValueBuilder().(*array.Float16Builder).Append(float16.New(float32(p) + float32(k)/8))
			}
		}
		out["tokens"] = append(out["tokens"], tb.NewRecordBatch())
		out["hidden"] = append(out["hidden"], hb.NewRecordBatch())
		tb.Release()
		hb.Release()
	}
	return out
}

// concat makes one table of a table's batches, to compare contents whatever the batching.
func concat(t *testing.T, recs []arrow.RecordBatch) arrow.Table {
	t.Helper()
	return array.NewTableFromRecords(recs[0].Schema(), recs)
}

func TestCachePutGet(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	c, err := OpenCache(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	c.mem = mem
	key, _ := NewKey("cfg", "v1", map[string]int{"x": 1})

	if got, ok, err := c.Get(key); ok || err != nil || got != nil {
		t.Fatalf("empty cache: want a clean miss, got %v %v %v", got, ok, err)
	}
	put := resultTables(t, mem)
	defer put.Release()
	if err := c.Put(key, put); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(key, put); err != nil { // the second Put of a key is a no-op
		t.Fatalf("second Put: %v", err)
	}
	got, ok, err := c.Get(key)
	if !ok || err != nil {
		t.Fatalf("Get after Put: ok %v, err %v", ok, err)
	}
	defer got.Release()
	if len(got) != len(put) {
		t.Fatalf("tables: want %d, got %d", len(put), len(got))
	}
	for name, recs := range put {
		want, have := concat(t, recs), concat(t, got[name])
		if !want.Schema().Equal(have.Schema()) {
			t.Errorf("%s schema (-want +got):\n-%s\n+%s", name, want.Schema(), have.Schema())
		} else if !array.TableEqual(want, have) {
			t.Errorf("%s: contents differ after the round trip", name)
		}
		want.Release()
		have.Release()
	}
	// Nothing but the entry is left in the directory: no temporary directories.
	entries, _ := os.ReadDir(c.Dir())
	if len(entries) != 1 || entries[0].Name() != key.String() {
		t.Errorf("cache dir holds %v, want only the entry", entries)
	}
}

func TestCachePutErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	c, _ := OpenCache(t.TempDir())
	key, _ := NewKey("cfg", "v1", 1)
	good := resultTables(t, mem)
	defer good.Release()
	tests := []struct {
		name   string
		tables Tables
	}{
		{"bad name", Tables{"../escape": good["tokens"]}},
		{"no batches", Tables{"tokens": nil}},
		{"mixed schemas", Tables{"tokens": {good["tokens"][0], good["hidden"][0]}}},
	}
	for _, tt := range tests {
		if err := c.Put(key, tt.tables); err == nil {
			t.Errorf("%s: want an error", tt.name)
		}
		if _, ok, _ := c.Get(key); ok {
			t.Errorf("%s: a failed Put left an entry", tt.name)
		}
	}
}

func TestCacheCorrupt(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	tests := []struct {
		name  string
		spoil func(entry string) error
	}{
		{"truncated parquet", func(e string) error { return os.Truncate(filepath.Join(e, "tokens.parquet"), 40) }},
		{"garbage parquet", func(e string) error {
			return os.WriteFile(filepath.Join(e, "hidden.parquet"), []byte("not parquet at all"), 0o644)
		}},
		{"missing table", func(e string) error { return os.Remove(filepath.Join(e, "tokens.parquet")) }},
		{"missing manifest", func(e string) error { return os.Remove(filepath.Join(e, manifestName)) }},
		{"bad manifest", func(e string) error { return os.WriteFile(filepath.Join(e, manifestName), []byte("{"), 0o644) }},
		{"row count", func(e string) error {
			return os.WriteFile(filepath.Join(e, manifestName), []byte(`{"version":1,"rows":{"tokens":7,"hidden":6}}`), 0o644)
		}},
		{"future version", func(e string) error {
			return os.WriteFile(filepath.Join(e, manifestName), []byte(`{"version":9,"rows":{}}`), 0o644)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := OpenCache(t.TempDir())
			c.mem = mem
			var reported []error
			c.OnCorrupt = func(k Key, err error) { reported = append(reported, err) }
			key, _ := NewKey("cfg", "v1", tt.name)
			tables := resultTables(t, mem)
			defer tables.Release()
			if err := c.Put(key, tables); err != nil {
				t.Fatal(err)
			}
			entry := filepath.Join(c.Dir(), key.String())
			if err := tt.spoil(entry); err != nil {
				t.Fatal(err)
			}
			got, ok, err := c.Get(key)
			if ok || err != nil || got != nil {
				t.Fatalf("corrupt entry: want a miss without error, got ok %v err %v", ok, err)
			}
			if len(reported) != 1 || !errors.Is(reported[0], ErrCorrupt) {
				t.Fatalf("want one ErrCorrupt report, got %v", reported)
			}
			if _, err := os.Stat(entry); !os.IsNotExist(err) {
				t.Errorf("corrupt entry was not removed")
			}
			// The key can be stored again.
			if err := c.Put(key, tables); err != nil {
				t.Fatal(err)
			}
			again, ok, err := c.Get(key)
			if !ok || err != nil {
				t.Fatalf("after re-Put: ok %v err %v", ok, err)
			}
			again.Release()
		})
	}
}

// Several goroutines storing the same key: all succeed, one entry results, and it reads back.
func TestCacheConcurrentPut(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	c, _ := OpenCache(t.TempDir())
	c.mem = mem
	key, _ := NewKey("cfg", "v1", "same")
	tables := resultTables(t, mem)
	defer tables.Release()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Put(key, tables)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Put %d: %v", i, err)
		}
	}
	got, ok, err := c.Get(key)
	if !ok || err != nil {
		t.Fatalf("ok %v err %v", ok, err)
	}
	got.Release()
	entries, _ := os.ReadDir(c.Dir())
	if len(entries) != 1 {
		t.Errorf("cache dir holds %d entries, want 1", len(entries))
	}
}
