package kernel

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// TestKillWhileWritingThenRestart: a server killed by SIGKILL while it writes a job's tables leaves them
// in the job's staging directory (a finished table and part of the next); the next server on the spill
// directory reports the job failed and removes them. Before, they stayed until the job expired. A job
// with every layer's lens readout (top 50) over 3,000 tokens takes long enough to write that the poll
// below finds the staging directory with a table in it; the attempts make a fast machine's window sure.
func TestKillWhileWritingThenRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("a real potato serve, killed while it writes, then restarted")
	}
	long := make([]int32, 3000)
	for i := range long {
		long[i] = int32((i * 11) % 3000)
	}
	layers := make([]int, 8) // the tiny model's
	for i := range layers {
		layers[i] = i
	}
	req := api.Request{Inputs: []api.Input{{Tokens: long}}, Options: api.Options{TopK: 50, Lens: layers, Hidden: layers}}
	for attempt := 1; ; attempt++ {
		spill := t.TempDir()
		p := startServe(t, spill, "127.0.0.1:0")
		id := p.submit(t, req)
		staged, ok := "", false
		for deadline := time.Now().Add(2 * time.Minute); !ok && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			dirs, _ := filepath.Glob(filepath.Join(spill, id, ".result.parquet.*.tmp"))
			for _, d := range dirs {
				if tabs, _ := filepath.Glob(filepath.Join(d, "result.*.parquet")); len(tabs) > 0 { // one table done
					staged, ok = d, true
				}
			}
			if !ok {
				if st := p.status(t, id); st.State.Terminal() {
					break // written before the poll saw it
				}
			}
		}
		if ok {
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			p.cmd.Wait()
			_, err := os.Stat(staged)
			ok = err == nil // else the set was published between the poll and the kill (about 1 s apart here)
		}
		if !ok {
			p.cmd.Process.Kill()
			p.cmd.Wait()
			if attempt == 3 {
				t.Fatalf("in 3 attempts the server was never killed while writing the job's tables")
			}
			continue
		}

		q := startServe(t, spill, "127.0.0.1:0")
		st := q.status(t, id)
		if st.State != api.StateFailed || !strings.Contains(st.Error, "stopped while this job was running") {
			t.Errorf("the job killed while written: %s %q", st.State, st.Error)
		}
		if _, err := os.Stat(staged); !os.IsNotExist(err) {
			t.Errorf("the restarted server left the killed writer's tables: %v", err)
		}
		left, _ := filepath.Glob(filepath.Join(spill, id, "*.parquet"))
		if len(left) > 0 {
			t.Errorf("tables of the killed job were published: %v", left)
		}
		return
	}
}
