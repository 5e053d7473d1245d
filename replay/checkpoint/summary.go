package checkpoint

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Summary describes a checkpoint directory for `potato inspect`: counts and bytes overall, per dtype and
// per shard.
type Summary struct {
	Dir            string
	Tensors        int
	Bytes          int64 // tensor data, the sum of Tensor.Size
	FileBytes      int64 // shard files, headers and padding included
	IndexTotalSize int64 // metadata.total_size of the index, -1 when absent (not enforced, see Index)
	DTypes         []DTypeSummary
	Shards         []ShardSummary
}

// DTypeSummary counts the tensors of one dtype.
type DTypeSummary struct {
	DType   DType
	Tensors int
	Bytes   int64
}

// ShardSummary describes one shard file.
type ShardSummary struct {
	File        string
	Size        int64 // file size
	HeaderBytes int64 // 8 + header length
	Tensors     int
	Bytes       int64
	Metadata    map[string]string
}

// Summary returns counts and byte totals. K3 should show 497,220 tensors and 1,560,860,324,864 bytes.
func (d *Dir) Summary() Summary {
	s := Summary{Dir: d.path, Tensors: len(d.tensors), IndexTotalSize: d.indexTotal}
	byType := map[DType]*DTypeSummary{}
	for _, sh := range d.shards {
		h := sh.hdr
		ss := ShardSummary{File: h.File, Size: h.Size, HeaderBytes: h.DataStart, Tensors: len(h.Tensors),
			Metadata: h.Metadata}
		for _, t := range h.Tensors {
			ss.Bytes += t.Size
			ds := byType[t.DType]
			if ds == nil {
				ds = &DTypeSummary{DType: t.DType}
				byType[t.DType] = ds
			}
			ds.Tensors++
			ds.Bytes += t.Size
		}
		s.Bytes += ss.Bytes
		s.FileBytes += ss.Size
		s.Shards = append(s.Shards, ss)
	}
	for _, ds := range byType {
		s.DTypes = append(s.DTypes, *ds)
	}
	slices.SortFunc(s.DTypes, func(a, b DTypeSummary) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(string(a.DType), string(b.DType)))
	})
	return s
}

// String renders the summary in a few lines: totals, then one line per dtype.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d shards, %s tensors, %s bytes of tensor data (%s bytes on disk)",
		s.Dir, len(s.Shards), group(int64(s.Tensors)), group(s.Bytes), group(s.FileBytes))
	if s.IndexTotalSize >= 0 && s.IndexTotalSize != s.Bytes {
		fmt.Fprintf(&b, "; the index says total_size %s", group(s.IndexTotalSize))
	}
	for _, ds := range s.DTypes {
		fmt.Fprintf(&b, "\n  %-8s %9s tensors %19s bytes", ds.DType, group(int64(ds.Tensors)), group(ds.Bytes))
	}
	return b.String()
}

// group writes n with thousands separators: 1,560,860,324,864.
func group(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var parts []string
	for len(s) > 3 {
		parts = append([]string{s[len(s)-3:]}, parts...)
		s = s[:len(s)-3]
	}
	parts = append([]string{s}, parts...)
	out := strings.Join(parts, ",")
	if neg {
		out = "-" + out
	}
	return out
}
