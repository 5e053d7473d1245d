package display_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/kernel/display"
)

// A small record with a token piece and its logprob, rendered as a table; the example prints the footer.
func ExampleHTMLTable() {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "token", Type: arrow.BinaryTypes.String},
		{Name: "logprob", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).AppendValues([]string{"Hello", ",", " world", "<eos>"}, nil)
	b.Field(1).(*array.Float32Builder).AppendValues([]float32{-1.25, -0.5, -3.75, 0}, []bool{true, true, true, false})
	rec := b.NewRecordBatch()
	defer rec.Release()

	html := display.HTMLTable(rec, 3)
	fmt.Println(strings.Contains(html, "&lt;eos&gt;")) // the fourth row is cut
	fmt.Println(html[strings.LastIndex(html, ">4 rows")+1 : strings.LastIndex(html, "</p>")])
	// Output:
	// false
	// 4 rows × 2 columns (first 3 shown)
}

// A progress report rendered as the one line under the bar.
func ExampleProgress_Summary() {
	p := display.Progress{Layer: 31, Layers: 93, Tokens: 12345, Bytes: 500e9, Elapsed: 10 * time.Second}
	fmt.Println(p.Summary())
	// Output:
	// 31 of 93 layers done · next layer 31 · 12,345 tokens · 50 GB/s · ETA 20s
}
