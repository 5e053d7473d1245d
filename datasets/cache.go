package datasets

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Tables is the result of one request as the cache stores it: record batches by table name ("tokens",
// "lens", "hidden", ...). All batches of one table share a schema.
type Tables map[string][]arrow.RecordBatch

// Release releases every batch; call it on Tables returned by Cache.Get.
func (t Tables) Release() {
	for _, recs := range t {
		releaseAll(recs)
	}
}

// Cache keeps replay results on disk, one directory per Key holding a Parquet file per table and a
// manifest. An entry appears whole or not at all: Put writes it in a temporary directory and renames that
// into place, so a reader never sees half an entry, even across processes.
//
// Entries are never overwritten: the first Put of a key wins (a key names one result, so a second Put
// would write the same data). Nothing is ever evicted; delete the directory to empty the cache.
type Cache struct {
	// OnCorrupt is told about every entry Get could not read back (the error matches ErrCorrupt). Get
	// then removes the entry and reports a miss, so the result is recomputed. OpenCache sets it to log
	// the error with the standard logger.
	OnCorrupt func(key Key, err error)

	dir string
	mem memory.Allocator
}

// OpenCache returns the cache in dir, creating the directory if needed.
func OpenCache(dir string) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("datasets: cache: %w", err)
	}
	return &Cache{
		dir: dir,
		mem: memory.DefaultAllocator,
		OnCorrupt: func(key Key, err error) {
			log.Printf("%v (treated as a miss)", err)
		},
	}, nil
}

// Dir returns the cache's directory.
func (c *Cache) Dir() string { return c.dir }

// manifest is written last in an entry; it lists the tables and their row counts, which Get checks.
type manifest struct {
	Version int            `json:"version"`
	Rows    map[string]int `json:"rows"` // table name -> rows
}

const (
	manifestName    = "manifest.json"
	manifestVersion = 1
)

// tableName is what a table may be called: it becomes a file name.
var tableName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`)

// Put stores tables under key. Each table needs at least one batch (a zero-row batch is fine: it keeps
// the schema). If key is already stored, Put does nothing.
func (c *Cache) Put(key Key, tables Tables) error {
	final := filepath.Join(c.dir, key.String())
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	m := manifest{Version: manifestVersion, Rows: map[string]int{}}
	for name, recs := range tables {
		if !tableName.MatchString(name) {
			return fmt.Errorf("datasets: cache put %s: table name %q: want letters, digits, _ and -", key, name)
		}
		if len(recs) == 0 {
			return fmt.Errorf("datasets: cache put %s: table %q has no record batches", key, name)
		}
		for _, r := range recs {
			m.Rows[name] += int(r.NumRows())
		}
	}
	tmp, err := os.MkdirTemp(c.dir, ".tmp-"+key.String()[:16]+"-")
	if err != nil {
		return fmt.Errorf("datasets: cache put %s: %w", key, err)
	}
	defer os.RemoveAll(tmp) // after a successful rename there is nothing left to remove
	for name, recs := range tables {
		if err := writeFileSynced(filepath.Join(tmp, name+".parquet"), func(f *os.File) error {
			return writeParquet(f, recs[0].Schema(), recs)
		}); err != nil {
			return fmt.Errorf("datasets: cache put %s: table %q: %w", key, name, err)
		}
	}
	mj, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("datasets: cache put %s: %w", key, err)
	}
	if err := writeFileSynced(filepath.Join(tmp, manifestName), func(f *os.File) error {
		_, err := f.Write(mj)
		return err
	}); err != nil {
		return fmt.Errorf("datasets: cache put %s: %w", key, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			return nil // another writer stored the same key first
		}
		return fmt.Errorf("datasets: cache put %s: %w", key, err)
	}
	return nil
}

// Get returns the tables stored under key, ok false on a miss. An entry that cannot be read back (a
// missing or truncated file, a manifest that disagrees with the data) is reported to OnCorrupt, removed,
// and returned as a miss; err is only for failures of the cache directory itself. The caller releases
// the returned Tables.
func (c *Cache) Get(key Key) (tables Tables, ok bool, err error) {
	entry := filepath.Join(c.dir, key.String())
	if _, err := os.Stat(entry); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("datasets: cache get %s: %w", key, err)
	}
	tables, err = c.readEntry(entry)
	if err != nil {
		err = fmt.Errorf("%w %s: %w", ErrCorrupt, entry, err)
		if c.OnCorrupt != nil {
			c.OnCorrupt(key, err)
		}
		if rerr := os.RemoveAll(entry); rerr != nil {
			return nil, false, fmt.Errorf("datasets: cache get %s: removing corrupt entry: %w", key, rerr)
		}
		return nil, false, nil
	}
	return tables, true, nil
}

// readEntry reads the manifest and every table it lists, and checks the row counts.
func (c *Cache) readEntry(entry string) (Tables, error) {
	mj, err := os.ReadFile(filepath.Join(entry, manifestName))
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(mj, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", manifestName, err)
	}
	if m.Version != manifestVersion {
		return nil, fmt.Errorf("%s: version %d, want %d", manifestName, m.Version, manifestVersion)
	}
	names := make([]string, 0, len(m.Rows))
	for name := range m.Rows {
		if !tableName.MatchString(name) {
			return nil, fmt.Errorf("%s: bad table name %q", manifestName, name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	tables := Tables{}
	for _, name := range names {
		recs, err := c.readTable(filepath.Join(entry, name+".parquet"))
		if err != nil {
			tables.Release()
			return nil, fmt.Errorf("table %q: %w", name, err)
		}
		tables[name] = recs
		rows := 0
		for _, r := range recs {
			rows += int(r.NumRows())
		}
		if rows != m.Rows[name] {
			tables.Release()
			return nil, fmt.Errorf("table %q: %d rows, manifest says %d", name, rows, m.Rows[name])
		}
	}
	return tables, nil
}

// readTable reads one Parquet file of an entry.
func (c *Cache) readTable(path string) ([]arrow.RecordBatch, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readParquetBatches(f, c.mem)
}

// writeFileSynced creates path, lets write fill it, and syncs it to disk before closing, so that the
// rename that publishes an entry never publishes a file whose data is still only in the page cache.
func writeFileSynced(path string, write func(*os.File) error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
