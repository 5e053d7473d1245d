package replay

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Damage on disk, at the engine: a model directory written by synth, opened, then damaged while the
// engine holds it open (a shard truncated, a bf16 NaN, an E8M0 scale of 255 in one routed expert).
// Each wave that reads the damage fails with the shard file and the tensor named and holds nothing
// afterwards; waves that do not read it, and every wave once the file is repaired, give exactly the
// results of the undamaged model.

// privateModel copies the tiny model into a directory of the test's own, which it may damage.
func privateModel(t *testing.T) string {
	t.Helper()
	src := synthModel(t, "tiny", 1)
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// locate returns where tensor name lies in dir.
func locate(t *testing.T, dir, name string) checkpoint.Tensor {
	t.Helper()
	d, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tn, ok := d.Lookup(name)
	if !ok {
		t.Fatalf("no tensor %s in %s", name, dir)
	}
	return tn
}

// allTensors maps every tensor of dir to where it lies.
func allTensors(t *testing.T, dir string) map[string]checkpoint.Tensor {
	t.Helper()
	d, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out := map[string]checkpoint.Tensor{}
	for _, tn := range d.Tensors() {
		out[tn.Name] = tn
	}
	return out
}

// damage overwrites bytes at off of the shard file in place (the engine's open handles see it) and
// returns the function that repairs it.
func damage(t *testing.T, dir, file string, off int64, b []byte) (repair func()) {
	t.Helper()
	path := filepath.Join(dir, file)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := make([]byte, len(b))
	if _, err := f.ReadAt(old, off); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	return func() {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(old, off); err != nil {
			t.Fatal(err)
		}
	}
}

// truncate cuts the shard file to size in place and returns the function that writes it back whole.
func truncate(t *testing.T, dir, file string, size int64) (repair func()) {
	t.Helper()
	path := filepath.Join(dir, file)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	return func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // the same inode: open handles see the repair
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(whole, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// wantNamed fails the test unless err names the shard file and the tensor, and says what, and the engine
// holds no host bytes after the failed wave.
func wantNamed(t *testing.T, e *Engine, err error, file, tensor, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the damaged wave succeeded; want an error naming %s and %s", file, tensor)
	}
	for _, want := range []string{file, tensor, what} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n := e.HeldBytes(); n != 0 {
		t.Errorf("after the failed wave %d bytes are still held", n)
	}
}

// openPrivate opens the engine on dir (closed at the end of the test).
func openPrivate(t *testing.T, dir string) *Engine {
	t.Helper()
	e, d, err := Open(context.Background(), dir, cpu.New(cpu.Options{Precision: ops.BF16}), EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); d.Close() })
	return e
}

// TestDamagedShardAfterOpen: a shard truncated while the engine has it open (inside a tensor, or down to
// its header) fails the wave naming the shard and a tensor past the cut; once the file is whole again the
// same engine gives exactly the results it gave before.
func TestDamagedShardAfterOpen(t *testing.T) {
	dir := privateModel(t)
	e := openPrivate(t, dir)
	req := []Request{{Sequences: randomSequences(11, 3328, 9, 4), Options: Options{TopK: 3, Lens: []int{2}}}}
	want := runOne(t, e, req...)
	victim := locate(t, dir, e.Plan.LayerTensors(4)[0].Name)
	where := allTensors(t, dir) // before the damage: a truncated directory no longer opens
	for _, tt := range []struct {
		name string
		cut  int64
	}{
		{"inside a tensor", victim.Offset + victim.Size/2},
		{"down to its header", 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			repair := truncate(t, dir, victim.File, tt.cut)
			_, _, err := e.Run(context.Background(), req)
			var re *checkpoint.ReadError
			if !errors.As(err, &re) {
				t.Fatalf("Run = %v, want a *checkpoint.ReadError", err)
			}
			past := where[re.Tensor]
			if re.File != victim.File || past.File != victim.File || past.Offset+past.Size <= tt.cut {
				t.Errorf("the error names %s in %s, which the cut at %d of %s does not reach", re.Tensor, re.File, tt.cut, victim.File)
			}
			wantNamed(t, e, err, victim.File, re.Tensor, "unexpected EOF")
			if n := strings.Count(err.Error(), "tensor "); n != 1 { // only the one whose read failed
				t.Errorf("the error names %d tensors: %q", n, err)
			}
			repair()
			if got := runOne(t, e, req...); !reflect.DeepEqual(got, want) {
				t.Error("after the repair the results differ from before the damage")
			}
		})
	}
}

// TestNonFiniteWeightOnDisk: a NaN or Inf written into a layer's BF16 weight while the engine is open
// fails every wave at that layer naming the shard and the tensor; after the repair the results are exact.
func TestNonFiniteWeightOnDisk(t *testing.T) {
	dir := privateModel(t)
	e := openPrivate(t, dir)
	req := []Request{{Sequences: randomSequences(12, 3328, 7)}}
	want := runOne(t, e, req...)
	var victim checkpoint.Spec
	for _, s := range e.Plan.LayerTensors(5) {
		if s.DType == checkpoint.BF16 && len(s.Shape) == 2 {
			victim = s
			break
		}
	}
	tn := locate(t, dir, victim.Name)
	for _, bits := range []uint16{0x7fc0, 0xff80} { // NaN, -Inf
		repair := damage(t, dir, tn.File, tn.Offset+2*3, binary.LittleEndian.AppendUint16(nil, bits))
		_, _, err := e.Run(context.Background(), req)
		wantNamed(t, e, err, tn.File, tn.Name, "NaN or Inf")
		repair()
	}
	if got := runOne(t, e, req...); !reflect.DeepEqual(got, want) {
		t.Error("after the repair the results differ from before the damage")
	}
}

// routedAt returns the experts token id's one-token sequence routes to at MoE layer layer.
func routedAt(t *testing.T, e *Engine, id int32, layer int) []int32 {
	t.Helper()
	res := runOne(t, e, Request{Sequences: []Sequence{{Tokens: []int32{id}}}, Options: Options{Router: true}})
	for _, r := range res[0][0].Router {
		if r.Layer == layer {
			return r.IDs[:r.K]
		}
	}
	t.Fatalf("no routing at layer %d", layer)
	return nil
}

// expertVictim finds, at MoE layer layer, an expert that token hit routes to and token miss does not.
func expertVictim(t *testing.T, e *Engine, layer int) (expert int, hit, miss int32) {
	t.Helper()
	first := routedAt(t, e, 0, layer)
	for id := int32(1); id < 200; id++ {
		r := routedAt(t, e, id, layer)
		for _, x := range first {
			if !slices.Contains(r, x) {
				return int(x), 0, id
			}
		}
	}
	t.Fatal("every token routes to the same experts")
	return 0, 0, 0
}

// TestBadExpertScaleOnDisk: an E8M0 scale byte of 255 (NaN) written into one routed expert's w1 scale
// fails exactly the waves whose tokens choose that expert, naming the shard and the scale tensor; a wave
// that does not route to it is unaffected (experts are read only when chosen) and exact; after the
// repair the failing sequence gives exactly its results from before.
func TestBadExpertScaleOnDisk(t *testing.T) {
	dir := privateModel(t)
	e := openPrivate(t, dir)
	const layer = 3
	expert, hit, miss := expertVictim(t, e, layer)
	hitReq := []Request{{Sequences: []Sequence{{Tokens: []int32{hit}}}, Options: Options{TopK: 2}}}
	missReq := []Request{{Sequences: []Sequence{{Tokens: []int32{miss}}}, Options: Options{TopK: 2}}}
	wantHit, wantMiss := runOne(t, e, hitReq...), runOne(t, e, missReq...)

	name := model.ExpertPrefix(layer, expert) + "w1.weight_scale"
	tn := locate(t, dir, name)
	repair := damage(t, dir, tn.File, tn.Offset+5, []byte{255})
	_, _, err := e.Run(context.Background(), hitReq)
	wantNamed(t, e, err, tn.File, name, "255")
	if got := runOne(t, e, missReq...); !reflect.DeepEqual(got, wantMiss) {
		t.Error("a wave that does not route to the damaged expert differs from before the damage")
	}
	_, _, err = e.Run(context.Background(), append(missReq, hitReq...)) // together: the wave reads it
	wantNamed(t, e, err, tn.File, name, "255")
	repair()
	if got := runOne(t, e, hitReq...); !reflect.DeepEqual(got, wantHit) {
		t.Error("after the repair the results differ from before the damage")
	}
}

// TestDamagedBeforeOpen: damage present when the engine opens (a shard cut inside a tensor, a header
// length past the file, a dtype that does not fit the span, a missing shard) is refused by Open, naming
// the shard file (and the tensor where there is one); nothing is left open.
func TestDamagedBeforeOpen(t *testing.T) {
	src := privateModel(t)
	name := model.LayerPrefix(2) + "input_layernorm.weight"
	tn := locate(t, src, name)
	for _, tt := range []struct {
		label       string
		damage      func(dir string)
		file, other string
	}{
		{"cut inside a tensor", func(dir string) { truncate(t, dir, tn.File, tn.Offset+tn.Size-1) }, tn.File, ""},
		{"header length past the end", func(dir string) {
			damage(t, dir, tn.File, 0, binary.LittleEndian.AppendUint64(nil, 1<<62))
		}, tn.File, ""},
		{"dtype that does not fit the span", func(dir string) {
			hdr := readHeaderJSON(t, filepath.Join(dir, tn.File))
			i := strings.Index(hdr, `"`+name+`"`)
			j := strings.Index(hdr[i:], `"BF16"`)
			damage(t, dir, tn.File, int64(8+i+j), []byte(`"BOOL"`))
		}, tn.File, name},
		{"missing shard", func(dir string) { os.Remove(filepath.Join(dir, tn.File)) }, tn.File, ""},
	} {
		t.Run(tt.label, func(t *testing.T) {
			dir := t.TempDir()
			entries, _ := os.ReadDir(src)
			for _, e := range entries {
				data, _ := os.ReadFile(filepath.Join(src, e.Name()))
				os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644)
			}
			tt.damage(dir)
			e, d, err := Open(context.Background(), dir, cpu.New(cpu.Options{Precision: ops.BF16}), EngineOptions{})
			if err == nil {
				e.Close()
				d.Close()
				t.Fatal("Open accepted the damaged directory")
			}
			for _, want := range []string{tt.file, tt.other} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Open: %q does not name %q", err, want)
				}
			}
		})
	}
}

// readHeaderJSON returns the JSON header of a safetensors file.
func readHeaderJSON(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data)
	return string(data[8 : 8+n])
}

// TestShardRemoved: a shard removed before the engine first reads it (shards open on first use) fails
// the wave naming the file and a tensor; once it is back the results are exact. Removed after its handle
// opened, it is still read through that handle (POSIX keeps the inode), with the same results.
func TestShardRemoved(t *testing.T) {
	dir := privateModel(t)
	e := openPrivate(t, dir)
	req := []Request{{Sequences: randomSequences(13, 3328, 6)}}
	victim := locate(t, dir, e.Plan.LayerTensors(4)[0].Name)
	path := filepath.Join(dir, victim.File)
	if err := os.Rename(path, path+".away"); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.Run(context.Background(), req)
	var re *checkpoint.ReadError
	if !errors.As(err, &re) || re.File != victim.File {
		t.Fatalf("Run with %s removed = %v, want a *checkpoint.ReadError naming it", victim.File, err)
	}
	wantNamed(t, e, err, victim.File, re.Tensor, "no such file")
	if err := os.Rename(path+".away", path); err != nil {
		t.Fatal(err)
	}
	want := runOne(t, e, req...)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got := runOne(t, e, req...); !reflect.DeepEqual(got, want) {
		t.Error("read through the open handle of the removed shard, the results differ")
	}
}
