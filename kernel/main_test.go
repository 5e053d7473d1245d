package kernel

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/potato-k3/potato-k3/kernel/server"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/synth"
	"github.com/potato-k3/potato-k3/replay/tables"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// modelDir is the tiny synthetic model the in-process servers use.
var modelDir string

// TestMain builds the potato command once (Connect starts it as the background engine), points the
// cache at a temporary directory, and stops the background engine at the end.
func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "kernel-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "potato")
	build := exec.Command("go", "build", "-o", bin, "github.com/potato-k3/potato-k3/cmd/potato")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building potato:", err)
		return 1
	}
	os.Setenv(EnvBin, bin)
	os.Setenv(EnvCache, filepath.Join(tmp, "cache"))
	os.Unsetenv(EnvAddr)
	os.Unsetenv(EnvToken)
	modelDir = filepath.Join(tmp, "tiny")
	if _, err := synth.Write(context.Background(), modelDir, synth.Options{Preset: "tiny", Seed: 1}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := Shutdown(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	return m.Run()
}

// startServer runs a server on the tiny model (or cfg.ModelDir) in this process, listening on addr
// ("127.0.0.1:0" or "unix:/path"), and returns the address a client dials.
func startServer(t *testing.T, listen string, cfg server.Config) string {
	t.Helper()
	if cfg.ModelDir == "" {
		cfg.ModelDir = modelDir
	}
	cfg.SpillDir = t.TempDir()
	if cfg.Gather == 0 {
		cfg.Gather = -1 // start waves at once
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := server.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := server.Listen(listen)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return server.AddrString(l.Addr())
}

// solo replays seqs alone on a fresh engine with opts and returns the tables the server would send.
func solo(t *testing.T, opts replay.Options, float16 bool, seqs ...replay.Sequence) *tables.Set {
	t.Helper()
	o, err := server.OpenCPU(context.Background(), modelDir, ops.BF16, replay.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	res, _, err := o.Engine.Run(context.Background(), []replay.Request{{Sequences: seqs, Options: opts}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := tables.Build(res[0], tables.Options{HiddenFloat16: float16, Metadata: map[string]string{
		tables.MetaConfigHash: o.Engine.ConfigSHA256, tables.MetaWeightsHash: o.Engine.WeightsSHA256, tables.MetaEngine: replay.Version,
		tables.MetaPrecision: "bf16", tables.MetaBackend: o.Backend,
	}, Piece: tok(t).Piece})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Release)
	return set
}

// tok is the tiny model's tokenizer.
func tok(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tk, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// sameRecord fails the test unless got has want's schema (metadata included) and rows.
func sameRecord(t *testing.T, name string, got arrow.RecordBatch, want *tables.Table) {
	t.Helper()
	if got == nil {
		t.Fatalf("table %s: missing", name)
	}
	// the run's own keys (result set: the job id; request hash) are the server's, the rest the solo build's
	gm, wm := got.Schema().Metadata().ToMap(), want.Schema.Metadata().ToMap()
	if len(gm[tables.MetaResultSet]) != 16 || len(gm[tables.MetaRequestHash]) != 64 {
		t.Fatalf("table %s: result set %q, request hash %q", name, gm[tables.MetaResultSet], gm[tables.MetaRequestHash])
	}
	delete(gm, tables.MetaResultSet)
	delete(gm, tables.MetaRequestHash)
	if !got.Schema().Equal(want.Schema) || !maps.Equal(gm, wm) {
		t.Fatalf("table %s: schema\n got  %v\n want %v", name, got.Schema(), want.Schema)
	}
	g := array.NewTableFromRecords(got.Schema(), []arrow.RecordBatch{got})
	defer g.Release()
	w := want.ArrowTable()
	defer w.Release()
	if !array.TableEqual(g, w) {
		t.Fatalf("table %s: %d rows, want %d; not equal to a solo replay", name, g.NumRows(), w.NumRows())
	}
}
