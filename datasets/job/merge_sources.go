package job

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/potato-k3/potato-k3/replay/tables"
)

// sources are the parts of every directory, with the merged order of their conversations.
type sources struct {
	order  []placed                     // every conversation, by seq_id
	count  map[string]int               // conversations per part key
	files  map[string]map[string]string // part key -> table -> the file's path
	tables map[string]bool              // tables some part holds
	parts  int
	key    string // the job's Key, one for every directory
}

// placed is one conversation and the part that holds its rows.
type placed struct {
	seq  int
	part string // the part's key: filepath.Join(dir, part name), a plain name inside dir
}

// mergeSources reads and checks the manifests of dirs, then checks every part file they name against
// its manifest (checkFiles).
func mergeSources(dirs []string, partial bool) (*sources, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("job: merge: no directories")
	}
	s := &sources{count: map[string]int{}, files: map[string]map[string]string{}, tables: map[string]bool{}}
	var first *Manifest
	shards := map[string]string{} // shard -> directory
	count := 0
	seqs := map[int]string{}
	ids := map[string]string{}
	recorded := map[string]File{} // file path -> what its manifest records (rows, SHA-256)
	for _, dir := range dirs {
		m, err := ReadManifest(dir)
		if err != nil {
			return nil, err
		}
		if first == nil {
			first, s.key = m, m.Key
		} else if m.Key != first.Key && !first.Settings.SameJob(m.Settings) {
			return nil, fmt.Errorf("job: merge: %s and %s hold jobs of different settings: %s", dirs[0], dir,
				strings.Join(first.Settings.Diff(m.Settings), "; "))
		}
		sh, err := ParseShard(m.Shard)
		if err != nil {
			return nil, fmt.Errorf("job: merge: %s: %w", dir, err)
		}
		if other, ok := shards[m.Shard]; ok {
			return nil, fmt.Errorf("job: merge: %s and %s both hold shard %s", other, dir, m.Shard)
		}
		shards[m.Shard] = dir
		if count == 0 {
			count = sh.Count
		} else if sh.Count != count && !partial {
			return nil, fmt.Errorf("job: merge: %s is shard %s, others are of %d shards", dir, m.Shard, count)
		}
		if !m.Complete && !partial {
			return nil, fmt.Errorf("job: merge: %s is not complete (%d of %d conversations): finish it (run the same command again) or give --partial",
				dir, len(m.Done), m.ShardConversations)
		}
		if err := s.addParts(dir, m, recorded); err != nil {
			return nil, err
		}
		for id, d := range m.Done {
			if other, ok := ids[id]; ok {
				return nil, fmt.Errorf("job: merge: conversation %q is in %s and in %s", id, other, dir)
			}
			if other, ok := seqs[d.SeqID]; ok {
				return nil, fmt.Errorf("job: merge: seq_id %d is in %s and in %s", d.SeqID, other, dir)
			}
			if !plainName(d.Part) {
				return nil, fmt.Errorf("job: merge: %s: conversation %q is in part %q, not a plain name inside the job directory",
					manifestPath(dir), id, d.Part)
			}
			part := filepath.Join(dir, d.Part)
			if _, ok := s.files[part]; !ok {
				return nil, fmt.Errorf("job: merge: %s: conversation %q is in part %q, which the manifest's parts do not list",
					manifestPath(dir), id, d.Part)
			}
			ids[id], seqs[d.SeqID] = dir, dir
			s.order = append(s.order, placed{d.SeqID, part})
			s.count[part]++
		}
	}
	if !partial {
		if len(shards) != count {
			var missing []string
			for i := 0; i < count; i++ {
				if _, ok := shards[fmt.Sprintf("%d/%d", i, count)]; !ok {
					missing = append(missing, fmt.Sprintf("%d/%d", i, count))
				}
			}
			return nil, fmt.Errorf("job: merge: shards %s are missing (or give --partial)", strings.Join(missing, ", "))
		}
		if len(s.order) != first.Conversations {
			return nil, fmt.Errorf("job: merge: the directories hold %d conversations of the dataset's %d", len(s.order), first.Conversations)
		}
	}
	if err := s.checkFiles(recorded); err != nil {
		return nil, err
	}
	sort.Slice(s.order, func(i, j int) bool { return s.order[i].seq < s.order[j].seq })
	return s, nil
}

// addParts records the parts of dir's manifest m and what m records of each file (into recorded). The
// manifest is not trusted to stay inside dir: every part name and file path must be a plain name, so that
// a manifest edited by hand, or copied from elsewhere, cannot make a merge read files outside its job.
func (s *sources) addParts(dir string, m *Manifest, recorded map[string]File) error {
	for _, p := range m.Parts {
		if !plainName(p.Name) {
			return fmt.Errorf("job: merge: %s: part name %q is not a plain name inside the job directory", manifestPath(dir), p.Name)
		}
		part := filepath.Join(dir, p.Name)
		if _, ok := s.files[part]; ok {
			return fmt.Errorf("job: merge: %s: part %s is listed twice", manifestPath(dir), p.Name)
		}
		s.files[part] = map[string]string{}
		s.parts++
		for name, f := range p.Files {
			if !slices.Contains(tables.TableNames, name) {
				return fmt.Errorf("job: merge: %s: part %s holds table %q, which this version does not know (want one of %v)",
					manifestPath(dir), p.Name, name, tables.TableNames)
			}
			if !plainName(f.Path) {
				return fmt.Errorf("job: merge: %s: part %s's %s file %q is not a plain name inside the job directory",
					manifestPath(dir), p.Name, name, f.Path)
			}
			path := filepath.Join(dir, f.Path)
			s.files[part][name] = path
			recorded[path] = f
			s.tables[name] = true
		}
	}
	return nil
}

// checkFiles checks, before anything is written, that every part that holds conversations has a file of
// every table the merge writes, and that each such file has the SHA-256 its manifest records (where it
// records one), opens as Parquet and holds the rows the manifest records (read from the file's footer): a
// part file missing, cut short, damaged in place or not the one the manifest describes is refused by name
// rather than found half way through the merge, or not at all.
func (s *sources) checkFiles(recorded map[string]File) error {
	var used []string
	for part, n := range s.count {
		if n > 0 {
			used = append(used, part)
		}
	}
	sort.Strings(used) // the first fault in a fixed order, whatever the map's
	for _, part := range used {
		for _, name := range tables.TableNames {
			if !s.tables[name] {
				continue
			}
			path, ok := s.files[part][name]
			if !ok {
				return fmt.Errorf("job: merge: %s: part %s has no %s table, which other parts have",
					manifestPath(filepath.Dir(part)), filepath.Base(part), name)
			}
			want := recorded[path]
			if want.SHA256 != "" {
				sum, err := FileSHA256(path)
				if err != nil {
					return fmt.Errorf("job: merge: %w", err)
				}
				if sum != want.SHA256 {
					return fmt.Errorf("job: merge: part file %s has changed since its job wrote it (SHA-256 %s…, its manifest %s records %s…): rerun the job in that directory to replay its part",
						path, sum[:12], manifestPath(filepath.Dir(part)), want.SHA256[:min(12, len(want.SHA256))])
				}
			}
			got, err := tables.ParquetRows(path)
			if err != nil {
				return fmt.Errorf("job: merge: %w", err) // it names the file
			}
			if got != want.Rows {
				return fmt.Errorf("job: merge: part file %s holds %d rows, its manifest (%s) records %d",
					path, got, manifestPath(filepath.Dir(part)), want.Rows)
			}
		}
	}
	return nil
}

// plainName reports whether name is a file name alone: not empty, not "." or "..", and with no
// separator, so that joined to a job directory it names a file inside it.
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, `/\`) && filepath.Base(name) == name
}

// manifestPath is the manifest file of the job directory dir, for errors.
func manifestPath(dir string) string { return filepath.Join(dir, ManifestName) }
