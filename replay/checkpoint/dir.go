package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
)

// Dir is an opened checkpoint directory: every shard header parsed and validated, every tensor located,
// index and shards in agreement. It reads tensor data on demand (read.go) and is safe for concurrent use.
type Dir struct {
	path       string
	tensors    []Tensor // in file order: shards by name, then by offset
	byName     map[string]int32
	shards     []*shard // sorted by file name
	byFile     map[string]*shard
	indexTotal int64 // metadata.total_size of the index, -1 when absent or unsharded
	reader           // read.go: worker slots, counters, bounce buffers
}

// shard is one safetensors file of the directory.
type shard struct {
	hdr   *Header
	path  string
	files fileSet // read.go: lazily opened handles
}

// Open reads the index (or a lone model.safetensors), parses every shard header concurrently and checks
// that the index and the headers agree tensor for tensor. Everything wrong is reported at once, joined:
// each part is a *FileError naming the file and the tensor (errors.Is ErrHeader or ErrIndex).
func Open(dir string, opts ...Option) (*Dir, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	d := &Dir{path: dir, indexTotal: -1}
	d.reader.init(o)
	idx, err := readIndex(dir)
	if err != nil {
		return nil, err
	}
	if idx != nil {
		d.indexTotal = idx.TotalSize
	}
	names := []string{SingleFile}
	if idx != nil {
		names = slices.Sorted(slices.Values(idx.Shards))
	}
	if err := d.openShards(names, idx); err != nil {
		return nil, err
	}
	if err := d.locate(idx); err != nil {
		return nil, err
	}
	return d, nil
}

// readIndex returns the parsed index, or nil for an unsharded checkpoint (no index, a model.safetensors).
func readIndex(dir string) (*Index, error) {
	data, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join(dir, SingleFile)); serr == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: %s has neither %s nor %s", ErrIndex, dir, IndexFile, SingleFile)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIndex, err)
	}
	return ParseIndex(data)
}

// openShards parses the headers of the named shards with a bounded pool: header reading is a few small
// reads and a parse per shard, so a few workers per core keep both the disk and the CPUs busy.
func (d *Dir) openShards(names []string, idx *Index) error {
	d.shards = make([]*shard, len(names))
	d.byFile = make(map[string]*shard, len(names))
	errs := make([]error, len(names))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(len(names), max(4, 2*runtime.GOMAXPROCS(0))) {
		wg.Go(func() {
			for i := range work {
				p := filepath.Join(d.path, names[i])
				h, err := readHeader(p, false)
				switch {
				case errors.Is(err, fs.ErrNotExist) && idx != nil:
					err = &FileError{File: IndexFile, Kind: ErrIndex,
						Msg: fmt.Sprintf("shard %s does not exist (it holds %s)", names[i], exampleTensors(idx, names[i]))}
				case err != nil && !errors.Is(err, ErrHeader):
					err = &FileError{File: names[i], Kind: ErrHeader, Msg: err.Error()}
				}
				errs[i] = err
				d.shards[i] = &shard{hdr: h, path: p}
			}
		})
	}
	for i := range names {
		work <- i
	}
	close(work)
	wg.Wait()
	var list errorList
	for i, err := range errs {
		if err != nil {
			list.add(err)
			continue
		}
		d.byFile[names[i]] = d.shards[i]
	}
	return list.err()
}

// exampleTensors names the tensors the index maps to file, for an error message: the first and a count.
func exampleTensors(idx *Index, file string) string {
	n, first := 0, ""
	for _, e := range idx.Entries {
		if e.File == file {
			if n == 0 {
				first = e.Name
			}
			n++
		}
	}
	if n == 1 {
		return "tensor " + first
	}
	return fmt.Sprintf("%d tensors, e.g. %s", n, first)
}

// locate builds the name table from the headers and, for a sharded checkpoint, checks it against the
// index in both directions: each index entry names a tensor that its shard holds, and each tensor in a
// shard is in the index, mapped to that shard.
func (d *Dir) locate(idx *Index) error {
	n := 0
	for _, s := range d.shards {
		n += len(s.hdr.Tensors)
	}
	d.tensors = make([]Tensor, 0, n)
	for _, s := range d.shards {
		d.tensors = append(d.tensors, s.hdr.Tensors...)
	}
	// No global sort: the map gives lookups and finds names in two shards; Names sorts on demand.
	var list errorList
	d.byName = make(map[string]int32, n)
	for i, t := range d.tensors {
		// One map operation per tensor: a name seen before leaves the length unchanged.
		n := len(d.byName)
		d.byName[t.Name] = int32(i)
		if len(d.byName) == n {
			list.add(d.duplicate(i))
		}
	}
	if idx == nil {
		return list.err()
	}
	seen := make([]bool, len(d.tensors))
	for _, e := range idx.Entries {
		i, ok := d.byName[e.Name]
		switch {
		case !ok:
			list.add(&FileError{File: IndexFile, Tensor: e.Name, Kind: ErrIndex,
				Msg: "the index maps it to " + e.File + ", which does not have it"})
		case seen[i]:
			list.add(&FileError{File: IndexFile, Tensor: e.Name, Kind: ErrIndex, Msg: "appears twice in weight_map"})
		case d.tensors[i].File != e.File:
			list.add(&FileError{File: IndexFile, Tensor: e.Name, Kind: ErrIndex,
				Msg: "the index maps it to " + e.File + " but it is in " + d.tensors[i].File})
		}
		if ok {
			seen[i] = true
		}
	}
	for i, t := range d.tensors {
		if !seen[i] {
			list.add(&FileError{File: t.File, Tensor: t.Name, Kind: ErrIndex, Msg: "is in the shard but not in the index"})
		}
	}
	return list.err()
}

// duplicate describes tensor i, whose name an earlier tensor has too, and points the map back at the first.
func (d *Dir) duplicate(i int) error {
	t := d.tensors[i]
	j := slices.IndexFunc(d.tensors, func(u Tensor) bool { return u.Name == t.Name })
	d.byName[t.Name] = int32(j)
	if d.tensors[j].File == t.File {
		return &FileError{File: t.File, Tensor: t.Name, Kind: ErrHeader, Msg: "appears twice in the header"}
	}
	return &FileError{File: t.File, Tensor: t.Name, Kind: ErrIndex, Msg: "is also in shard " + d.tensors[j].File}
}

// Path returns the directory Open was given.
func (d *Dir) Path() string { return d.path }

// Lookup returns the tensor called name.
func (d *Dir) Lookup(name string) (Tensor, bool) {
	i, ok := d.byName[name]
	if !ok {
		return Tensor{}, false
	}
	return d.tensors[i], true
}

// Len returns the number of tensors.
func (d *Dir) Len() int { return len(d.tensors) }

// Count returns the number of tensors whose names start with none of skipPrefixes, the tensors Check
// expects a spec for: a caller can compare it with the count its specs would have before building them.
func (d *Dir) Count(skipPrefixes ...string) int {
	n := 0
	for _, t := range d.tensors {
		if !hasAnyPrefix(t.Name, skipPrefixes) {
			n++
		}
	}
	return n
}

// Names returns every tensor name, sorted.
func (d *Dir) Names() []string {
	names := make([]string, len(d.tensors))
	for i, t := range d.tensors {
		names[i] = t.Name
	}
	slices.Sort(names)
	return names
}

// Tensors returns every tensor in file order (shards by file name, then by offset), the order that reads
// a whole checkpoint sequentially. The slice is a copy; the shapes are shared: do not modify them.
func (d *Dir) Tensors() []Tensor { return slices.Clone(d.tensors) }

// Headers returns the parsed header of every shard, sorted by file name.
func (d *Dir) Headers() []*Header {
	hs := make([]*Header, len(d.shards))
	for i, s := range d.shards {
		hs[i] = s.hdr
	}
	return hs
}

// Option configures Open.
type Option func(*options)

type options struct {
	direct  bool  // read tensor data with O_DIRECT (Linux), bypassing the page cache
	workers int   // positioned reads in flight per Dir
	segment int64 // bytes per positioned read
}

// DefaultSegmentSize is the size of the positioned reads a tensor is split into. 8 MiB is large enough
// that per-call overhead vanishes against NVMe bandwidth and small enough that a 1.2 GB embedding is read
// by many reads in parallel and that cancellation is noticed within one segment.
const DefaultSegmentSize = 8 << 20

func defaultOptions() options {
	// NVMe needs many requests in flight to reach its bandwidth; the reads block in the kernel, not on CPU.
	return options{workers: max(16, 4*runtime.GOMAXPROCS(0)), segment: DefaultSegmentSize}
}

// WithDirectIO makes reads bypass the page cache with O_DIRECT where the platform and file system allow
// it. Streaming 1.56 TB through the page cache only evicts useful pages and costs a copy; direct reads
// go straight to the device. Where O_DIRECT is refused (tmpfs on older kernels, non-Linux), reads fall
// back to buffered I/O, per shard, without an error.
func WithDirectIO(on bool) Option { return func(o *options) { o.direct = on } }

// WithReadConcurrency sets how many positioned reads a Dir keeps in flight at most, across all callers
// (default max(16, 4*GOMAXPROCS)). Values below 1 keep the default.
func WithReadConcurrency(n int) Option {
	return func(o *options) {
		if n >= 1 {
			o.workers = n
		}
	}
}

// WithSegmentSize sets the size of one positioned read (default DefaultSegmentSize). It is rounded up to
// a multiple of DirectAlignment so that segment boundaries stay aligned for O_DIRECT. Values below 1
// keep the default.
func WithSegmentSize(n int64) Option {
	return func(o *options) {
		if n >= 1 {
			o.segment = (n + DirectAlignment - 1) &^ (DirectAlignment - 1)
		}
	}
}
