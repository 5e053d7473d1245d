package datasets

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Damaged Parquet files that made the reader ask the Go runtime for more memory than any machine has,
// which is a fatal error, not a panic (found by FuzzReadParquet and a mutation loop over its seeds, each
// under 2.2 kB): each must now be refused with the file named, and reading it must allocate little.
func TestReadParquetDamagedStaysSmall(t *testing.T) {
	tests := []struct {
		file, want, was string
	}{
		{"stored-schema-message-length.parquet", "", "34 GB for the stored Arrow schema's IPC message body"},
		{"stored-schema-children-length.parquet", "", "153 GB for a field's children in the stored Arrow schema"},
		{"chunk-size-negative.parquet", "does not fit in the file", "a negative column chunk size: makeslice panic on an arrow-go goroutine"},
		{"zstd-frame-size.parquet", "could not decompress page", "2.8 GB for a zstd frame inside a 1 kB file (up to 64 GB possible)"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", "damaged", tt.file)
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			convs, err := LoadParquet(path)
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
				t.Errorf("reading it allocated %d MB (it once asked for %s)", alloc>>20, tt.was)
			}
			if err == nil {
				t.Logf("read as %d conversations (the damage now falls where it does no harm)", len(convs))
				return
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q: want the file named and …%s…", err, tt.want)
			}
		})
	}
}
