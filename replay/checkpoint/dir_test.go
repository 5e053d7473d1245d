package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	model := smallModel()
	writeCheckpoint(t, dir, model)
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var want []string
	var bytes int64
	for file, tensors := range model {
		for _, x := range tensors {
			want = append(want, x.name)
			bytes += int64(len(x.bytes()))
			got, ok := d.Lookup(x.name)
			if !ok {
				t.Errorf("Lookup(%s) failed", x.name)
				continue
			}
			if got.File != file || got.DType != x.dtype || !slices.Equal(got.Shape, x.shape) || got.Size != int64(len(x.bytes())) {
				t.Errorf("Lookup(%s) = %v, want %s %s in %s", x.name, got, ShapeString(x.shape), x.dtype, file)
			}
		}
	}
	slices.Sort(want)
	if got := d.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if _, ok := d.Lookup("nope"); ok {
		t.Error("Lookup of an absent name succeeded")
	}
	s := d.Summary()
	if s.Tensors != len(want) || s.Bytes != bytes || s.IndexTotalSize != bytes || len(s.Shards) != 2 || d.Len() != len(want) {
		t.Errorf("Summary = %+v, want %d tensors, %d bytes, 2 shards", s, len(want), bytes)
	}
	if s.DTypes[0].DType != BF16 || s.DTypes[0].Tensors != 5 {
		t.Errorf("largest dtype %+v, want BF16 with 5 tensors", s.DTypes[0])
	}
	if str := s.String(); !strings.Contains(str, "2 shards, 8 tensors, 772 bytes of tensor data") {
		t.Errorf("Summary.String() = %q", str)
	}
}

func TestOpenUnsharded(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, SingleFile, shardBytes([]tt{{name: "w", dtype: F32, shape: []int64{2}}}))
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if w, ok := d.Lookup("w"); !ok || w.File != SingleFile || d.Summary().IndexTotalSize != -1 {
		t.Errorf("Lookup(w) = %v, %v; want it in %s, no index total", w, ok, SingleFile)
	}
}

// TestOpenDamage builds a valid two-shard checkpoint, damages it one way per case, and wants every
// problem named with its file and tensor.
func TestOpenDamage(t *testing.T) {
	const (
		s1  = "model-00001-of-00002.safetensors"
		s2  = "model-00002-of-00002.safetensors"
		emb = "language_model.model.embed_tokens.weight"
		hd  = "language_model.lm_head.weight"
	)
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   []string // each must appear in the error
		kind   error
	}{
		{"index names a missing shard", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, s2)) },
			[]string{IndexFile + ": shard " + s2 + " does not exist (it holds 5 tensors, e.g. language_model.lm_head.weight)"}, ErrIndex},
		{"tensor in the index but not in its shard", func(t *testing.T, dir string) {
			m := smallModel()
			m[s1] = m[s1][1:]
			writeFile(t, dir, s1, shardBytes(m[s1]))
		}, []string{IndexFile + ": tensor " + emb + ": the index maps it to " + s1 + ", which does not have it"}, ErrIndex},
		{"tensor in a shard but not in the index", func(t *testing.T, dir string) {
			m := smallModel()
			m[s1] = append(m[s1], tt{name: "extra.weight", dtype: BF16, shape: []int64{3}})
			writeFile(t, dir, s1, shardBytes(m[s1]))
		}, []string{s1 + ": tensor extra.weight: is in the shard but not in the index"}, ErrIndex},
		{"index maps a tensor to the wrong shard", func(t *testing.T, dir string) {
			m := smallModel()
			m[s1], m[s2] = append(m[s1], m[s2][3]), m[s2][:3]
			m[s2] = append(m[s2], tt{name: "vision_tower.patch_embed.weight", dtype: BF16, shape: []int64{2, 2}})
			writeFile(t, dir, s1, shardBytes(m[s1]))
			writeFile(t, dir, s2, shardBytes(m[s2]))
		}, []string{IndexFile + ": tensor " + hd + ": the index maps it to " + s2 + " but it is in " + s1}, ErrIndex},
		{"tensor in two shards", func(t *testing.T, dir string) {
			m := smallModel()
			writeFile(t, dir, s1, shardBytes(append(m[s1], m[s2][3])))
		}, []string{"tensor " + hd + ": is also in shard " + s1}, ErrIndex},
		{"tensor twice in one shard", func(t *testing.T, dir string) {
			writeFile(t, dir, s1, rawShard(`{"`+emb+`":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},`+
				`"`+emb+`":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)))
		}, []string{s1 + ": tensor " + emb + ": appears twice in the header"}, ErrHeader},
		{"two damaged shards are both reported", func(t *testing.T, dir string) {
			for _, s := range []string{s1, s2} {
				b, _ := os.ReadFile(filepath.Join(dir, s))
				writeFile(t, dir, s, b[:len(b)-1])
			}
		}, []string{s1 + ": tensor language_model.model.norm.weight: data_offsets [272 288] end past file size",
			s2 + ": tensor vision_tower.patch_embed.weight: data_offsets [476 484] end past file size"}, ErrHeader},
		{"index shard name is a path", func(t *testing.T, dir string) {
			writeFile(t, dir, IndexFile, []byte(`{"weight_map":{"x":"../`+s1+`"}}`))
		}, []string{IndexFile + `: tensor x: shard "../` + s1 + `" is a path, want a plain file name`}, ErrIndex},
		{"no index and no single file", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, IndexFile)) },
			[]string{"has neither " + IndexFile + " nor " + SingleFile}, ErrIndex},
		{"shard is a directory", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, s2))
			os.Mkdir(filepath.Join(dir, s2), 0o755)
		}, []string{s2 + ": "}, ErrHeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCheckpoint(t, dir, smallModel())
			tc.damage(t, dir)
			d, err := Open(dir)
			if err == nil {
				d.Close()
				t.Fatal("Open accepted the damaged checkpoint")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n got: %s\nwant it to contain: %s", err, w)
				}
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("errors.Is(err, %v) = false for %v", tc.kind, err)
			}
		})
	}
}

func TestOpenCapsTheErrorList(t *testing.T) {
	dir := t.TempDir()
	var tensors []tt
	wm := map[string]string{}
	for i := range 2 * maxListed {
		name := "t" + strings.Repeat("x", i)
		tensors = append(tensors, tt{name: name, dtype: U8, shape: []int64{1}})
		wm[name+"-renamed"] = SingleFile
	}
	writeFile(t, dir, SingleFile, shardBytes(tensors))
	writeFile(t, dir, IndexFile, []byte(indexJSON(wm, 0)))
	_, err := Open(dir)
	if err == nil || !strings.HasSuffix(err.Error(), "... and 150 more problems") {
		t.Errorf("error does not end with the count of dropped problems: %v", err)
	}
}
