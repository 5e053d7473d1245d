package synth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/internal/diskspace"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// writeTiny writes the tiny preset with seed into a fresh directory and returns its path.
func writeTiny(t *testing.T, seed uint64, workers int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := Write(context.Background(), dir, Options{Preset: "tiny", Seed: seed, Workers: workers}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// dirDigest hashes every file of dir (names and contents, sorted by name).
func dirDigest(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][32]byte{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = sha256.Sum256(data)
	}
	return out
}

// TestDeterminism checks that a seed fixes every byte, whatever the number of generator goroutines, and
// that another seed changes every shard (and only the seed field of config.json).
func TestDeterminism(t *testing.T) {
	a := dirDigest(t, writeTiny(t, 7, 1))
	b := dirDigest(t, writeTiny(t, 7, 5))
	c := dirDigest(t, writeTiny(t, 8, 2))
	if len(a) == 0 {
		t.Fatal("empty directory")
	}
	for name, h := range a {
		if b[name] != h {
			t.Errorf("%s differs between 1 and 5 workers with the same seed", name)
		}
		if strings.HasSuffix(name, ".safetensors") && c[name] == h {
			t.Errorf("%s is the same for seeds 7 and 8", name)
		}
	}
}

// TestReaderAcceptsOutput opens a written directory with the checkpoint reader, checks it against the
// plan, and decodes tensors of every dtype.
func TestReaderAcceptsOutput(t *testing.T) {
	dir := writeTiny(t, 1, 0)
	plan, err := model.ReadFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Check(plan.Tensors(), model.IgnoredPrefixes...); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{
		model.TextPrefix + "embed_tokens.weight",
		model.TextPrefix + "layers.1.self_attn.A_log",
		model.ExpertPrefix(1, 3) + "w2.weight_scale",
	} {
		tn, ok := d.Lookup(name)
		if !ok {
			t.Fatalf("no tensor %s", name)
		}
		data := make([]byte, tn.Size)
		if err := d.ReadInto(ctx, tn, data); err != nil {
			t.Fatal(err)
		}
		if bytes.Count(data, []byte{0}) == len(data) {
			t.Errorf("tensor %s is all zeros", name)
		}
	}
}

// TestNoNaNScales reads every expert scale of the tiny preset: none may be 255 (NaN in E8M0).
func TestNoNaNScales(t *testing.T) {
	dir := writeTiny(t, 3, 0)
	d, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	n := 0
	for _, tn := range d.Tensors() {
		if !strings.HasSuffix(tn.Name, ".weight_scale") {
			continue
		}
		data := make([]byte, tn.Size)
		if err := d.ReadInto(context.Background(), tn, data); err != nil {
			t.Fatal(err)
		}
		if i := bytes.IndexByte(data, 255); i >= 0 {
			t.Fatalf("tensor %s: scale byte 255 at %d", tn.Name, i)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no scale tensors")
	}
}

// TestFailureLeavesNothing checks the temp-then-rename contract: a cancelled write leaves neither the
// target nor the temporary directory; a non-empty target is refused and left alone.
func TestFailureLeavesNothing(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "m")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Write(ctx, dir, Options{Preset: "tiny"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write: got %v, want context.Canceled", err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("a failed write left %v", entries)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(dir, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(context.Background(), dir, Options{Preset: "tiny"}); !errors.Is(err, ErrExists) {
		t.Fatalf("non-empty target: got %v, want ErrExists", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("the refused write touched the target: %v", err)
	}
	// An empty target directory is replaced.
	empty := filepath.Join(parent, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(context.Background(), empty, Options{Preset: "tiny"}); err != nil {
		t.Fatalf("empty target: %v", err)
	}
}

// TestSpaceCheck checks that a dense write larger than the free space is refused with the sizes named.
func TestSpaceCheck(t *testing.T) {
	free, ok := diskspace.Free(t.TempDir())
	if !ok {
		t.Skip("free space unknown on this system")
	}
	p, _ := LookupPreset("k3-full")
	err := checkSpace(filepath.Join(t.TempDir(), "m"), free*2+1, p)
	if !errors.Is(err, ErrSpace) || !strings.Contains(err.Error(), "--sparse") {
		t.Fatalf("got %v, want ErrSpace with a --sparse hint", err)
	}
	if err := checkSpace(filepath.Join(t.TempDir(), "m"), 1, p); err != nil {
		t.Fatalf("1 byte: %v", err)
	}
}

// TestTokenizerFiles loads the written tokenizer and checks it against config.json: vocabulary size and
// the BOS, stop and PAD ids at K3's offsets after the BPE tokens.
func TestTokenizerFiles(t *testing.T) {
	dir := writeTiny(t, 1, 0)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := model.ReadFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := plan.Config
	if tok.VocabSize() != c.VocabSize || tok.NumBPE() != c.VocabSize-tokenizer.NumSpecials {
		t.Fatalf("tokenizer has %d tokens (%d BPE), config.json says vocab_size %d", tok.VocabSize(), tok.NumBPE(), c.VocabSize)
	}
	stop, ok := tok.SpecialID("<|end_of_msg|>")
	if !ok {
		t.Fatal("no <|end_of_msg|> special")
	}
	if int(tok.BOS()) != c.BOSTokenID || int(stop) != c.EOSTokenID || int(tok.PAD()) != c.PadTokenID {
		t.Errorf("BOS/stop/PAD are %d/%d/%d, config.json says %d/%d/%d",
			tok.BOS(), stop, tok.PAD(), c.BOSTokenID, c.EOSTokenID, c.PadTokenID)
	}
	if ids := tok.Encode("Hello world"); len(ids) == 0 {
		t.Error("the tokenizer encodes nothing")
	}
}

// TestMissingParent checks that Write creates the target's missing parent directories.
func TestMissingParent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "tiny")
	if _, err := Write(context.Background(), dir, Options{Preset: "tiny"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
}

// cancelOnWrite cancels a context at the first progress line.
type cancelOnWrite struct{ cancel context.CancelFunc }

func (c cancelOnWrite) Write(p []byte) (int, error) { c.cancel(); return len(p), nil }

// TestCancelMidWrite interrupts a dense write of the small preset (200 MB) while data is streaming: the
// target must not appear and the temporary directory must be gone.
func TestCancelMidWrite(t *testing.T) {
	parent := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := Options{Preset: "small", Progress: cancelOnWrite{cancel}, ProgressEvery: time.Millisecond}
	if _, err := Write(ctx, filepath.Join(parent, "m"), o); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("an interrupted write left %v", entries)
	}
}
