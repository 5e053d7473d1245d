package replay

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// scarceBackend is pinnedBackend with little page-locked memory: AllocHost fails once limit bytes are
// live, as cuMemHostAlloc does when the host cache has taken what the machine can lock.
type scarceBackend struct {
	*pinnedBackend
	limit, refused int
}

func (s *scarceBackend) AllocHost(n int) ([]byte, error) {
	s.mu.Lock()
	live := 0
	for _, m := range s.live {
		live += m
	}
	s.mu.Unlock()
	if live+n > s.limit {
		s.refused++
		return nil, errors.New("AllocHost: out of page-locked memory")
	}
	return s.pinnedBackend.AllocHost(n)
}

// TestHostCacheWithScarcePinnedMemory: when the backend's host memory runs out while the host cache
// fills, the engine reads into ordinary memory instead (not cached, since it cannot be marked stable):
// every wave still succeeds with the same bits, and Close frees exactly the backend's buffers.
func TestHostCacheWithScarcePinnedMemory(t *testing.T) {
	dir := synthModel(t, "tiny", 1)
	seqs := randomSequences(5, 3328, 300, 41, 7)
	opts := Options{TopK: 3, Lens: []int{1}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: opts})
	s := &scarceBackend{pinnedBackend: newPinnedBackend(), limit: 3 << 20}
	e, d, err := Open(context.Background(), dir, s, EngineOptions{HostCacheBytes: 1 << 30, PrefetchExperts: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for wave := range 3 {
		if got := runOne(t, e, Request{Sequences: seqs, Options: opts}); !reflect.DeepEqual(got, want) {
			t.Fatalf("wave %d: results differ with scarce page-locked memory", wave)
		}
	}
	if s.refused == 0 || e.HostCacheBytes() == 0 || e.HostCacheBytes() > int64(s.limit) {
		t.Errorf("%d allocations refused, cache %d bytes (limit %d): want some refused and a partly filled cache", s.refused, e.HostCacheBytes(), s.limit)
	}
	e.Close()
	if len(s.live) != 0 {
		t.Errorf("after Close %d host buffers of the backend are live", len(s.live))
	}
}
