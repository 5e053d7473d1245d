package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/potato-k3/potato-k3/internal/filelock"
	"github.com/potato-k3/potato-k3/kernel/server"
)

// concurrentArgs is the request the tests of this file make.
var concurrentArgs = []Arg{Example("greeting"), TopK(2), Label("concurrent")}

// connectSlow starts a server whose jobs wait gather before they run (so that calls overlap the job) and
// returns n clients of it, each with flights of its own: to the results cache, n processes.
func connectSlow(t *testing.T, gather time.Duration, n int) []*Client {
	t.Helper()
	addr := startServer(t, "127.0.0.1:0", server.Config{Gather: gather})
	var cs []*Client
	for range n {
		c, err := Connect(WithAddr(addr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// jobCount is how many jobs the engine holds: each submission makes one.
func jobCount(t *testing.T, c *Client) int {
	t.Helper()
	jobs, err := c.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(jobs)
}

// entryOf is the results entry of args on c's engine.
func entryOf(t *testing.T, c *Client, args ...Arg) string {
	t.Helper()
	req, err := buildRequest(args)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := stateDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, resultsDir, cacheKey(req, info))
}

// placeClaim writes a claim on entry as another process would leave it, modified age ago.
func placeClaim(t *testing.T, entry string, rec claimRecord, age time.Duration) string {
	t.Helper()
	if err := os.MkdirAll(entry, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(entry, claimName)
	data, _ := json.Marshal(rec)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-age)
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
	return path
}

// replayAll runs one ReplayCached of concurrentArgs per client in calls, all at once.
func replayAll(calls []*Client) ([]*Result, []error) {
	rs, errs := make([]*Result, len(calls)), make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { rs[i], errs[i] = c.ReplayCached(context.Background(), concurrentArgs...) })
	}
	wg.Wait()
	return rs, errs
}

// Calls of one request at the same time submit it once, whether they are goroutines of one client (the
// first replays and stores, the others read the stored entry) or clients of their own, as processes
// sharing the cache are (one claims the entry and submits, the others wait for its pending.json and then
// for its job). Before, each call missed the cache, found no pending job and submitted: the replay ran
// once per call.
func TestReplayCachedConcurrent(t *testing.T) {
	for _, tt := range []struct {
		name    string
		clients int // clients made; the calls go to clients[i%clients]
		calls   int
		fetched int // calls that return a fresh fetch rather than the stored entry; -1: any
	}{
		{"goroutines of one client", 1, 3, 1},
		{"three clients", 3, 3, -1},
		{"two clients, two goroutines each", 2, 4, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvCache, t.TempDir())
			var warned strings.Builder // two calls that store one job's result at once both succeed
			cacheWarnings = &warned
			defer func() { cacheWarnings = os.Stderr }()
			cs := connectSlow(t, time.Second, tt.clients)
			var calls []*Client
			for i := range tt.calls {
				calls = append(calls, cs[i%len(cs)])
			}
			rs, errs := replayAll(calls)
			for _, r := range rs {
				defer r.Release()
			}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			if n := jobCount(t, cs[0]); n != 1 {
				t.Errorf("the engine has %d jobs, want 1: the request was submitted more than once", n)
			}
			fetched := 0
			for i, r := range rs {
				if !r.FromCache {
					fetched++
				}
				if r.Status.ID != rs[0].Status.ID {
					t.Errorf("call %d: job %s, call 0: job %s", i, r.Status.ID, rs[0].Status.ID)
				}
				if a, b := rs[0].Tokens(), r.Tokens(); a == nil || b == nil || !array.RecordEqual(a, b) {
					t.Errorf("call %d: tokens table differs from call 0's", i)
				}
			}
			if warned.Len() != 0 {
				t.Errorf("warned: %s", warned.String())
			}
			if tt.fetched >= 0 && fetched != tt.fetched {
				t.Errorf("%d calls fetched the job, want %d (the others read the stored entry)", fetched, tt.fetched)
			}
		})
	}
}

// Goroutines of one client share the first call's result when the cache cannot store it (before, each
// replayed), with the one warning.
func TestReplayCachedConcurrentUnwritable(t *testing.T) {
	warned := unwritableCache(t)
	c := connectSlow(t, time.Second, 1)[0]
	rs, errs := replayAll([]*Client{c, c, c})
	for i, r := range rs {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if r.FromCache || r.Status.ID != rs[0].Status.ID || !array.RecordEqual(r.Tokens(), rs[0].Tokens()) {
			t.Errorf("call %d: from cache %v, job %s; want call 0's job %s and tables", i, r.FromCache, r.Status.ID, rs[0].Status.ID)
		}
	}
	// Each caller owns its result: releasing one leaves the others' tables readable.
	rs[0].Release()
	for i, r := range rs[1:] {
		if r.Tokens() == nil || r.Tokens().NumRows() == 0 {
			t.Errorf("call %d: no tokens after call 0 released its result", i+1)
		}
		r.Release()
	}
	if n := jobCount(t, c); n != 1 {
		t.Errorf("the engine has %d jobs, want 1", n)
	}
	if n := strings.Count(warned.String(), "could not store a result"); n != 1 {
		t.Errorf("warned %d times, want once: %q", n, warned.String())
	}
}

// Within one client, a waiter whose context ends returns its context's error and the first call carries
// on; when the first call's context ends, a waiter carries on with the job it submitted.
func TestReplayCachedWaiterContext(t *testing.T) {
	t.Run("waiter's context ends", func(t *testing.T) {
		t.Setenv(EnvCache, t.TempDir())
		c := connectSlow(t, 2*time.Second, 1)[0]
		first := make(chan error, 1)
		go func() {
			r, err := c.ReplayCached(context.Background(), concurrentArgs...)
			r.Release()
			first <- err
		}()
		waitFor(t, func() bool { return jobCount(t, c) == 1 }) // the first call waits for its job
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := c.ReplayCached(ctx, concurrentArgs...)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "under way in this process") {
			t.Errorf("waiter: %v\nwant the context's error, waiting for the call under way", err)
		}
		if err := <-first; err != nil {
			t.Errorf("first call: %v", err)
		}
		if n := jobCount(t, c); n != 1 {
			t.Errorf("the engine has %d jobs, want 1", n)
		}
	})
	t.Run("first call's context ends", func(t *testing.T) {
		t.Setenv(EnvCache, t.TempDir())
		c := connectSlow(t, 2*time.Second, 1)[0]
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() {
			_, err := c.ReplayCached(ctx, concurrentArgs...)
			first <- err
		}()
		waitFor(t, func() bool { return jobCount(t, c) == 1 })
		second := make(chan *Result, 1)
		go func() {
			r, err := c.ReplayCached(context.Background(), concurrentArgs...)
			if err != nil {
				t.Errorf("second call: %v", err)
			}
			second <- r
		}()
		entry := entryOf(t, c, concurrentArgs...)
		waitFor(t, func() bool { // the second call has joined the first's flight
			c.flights.mu.Lock()
			defer c.flights.mu.Unlock()
			f := c.flights.m[entry]
			return f != nil && f.waiters == 1
		})
		cancel()
		if err := <-first; !errors.Is(err, context.Canceled) {
			t.Errorf("first call: %v, want its context's end", err)
		}
		r := <-second
		defer r.Release()
		jobs, _ := c.Jobs(context.Background())
		if len(jobs) != 1 || r == nil || r.Status.ID != jobs[0].ID {
			t.Errorf("engine jobs %v; want the one the first call submitted, fetched by the second", jobs)
		}
	})
}

// A call that finds the entry claimed by another process waits until that process names its job in
// pending.json (whether it removes its claim after or not), then waits for that job and fetches it:
// nothing submitted of its own. If its context ends while it waits, it returns the context's error,
// has submitted nothing, and leaves the claim.
func TestReplayCachedWaitsForClaim(t *testing.T) {
	host, _ := os.Hostname()
	for _, release := range []bool{true, false} {
		name := map[bool]string{true: "claim removed after pending.json", false: "claim kept"}[release]
		t.Run(name, func(t *testing.T) {
			t.Setenv(EnvCache, t.TempDir())
			c := connectSlow(t, -1, 1)[0]
			entry := entryOf(t, c, concurrentArgs...)
			// the other process: alive (this one's pid) and just claimed
			claimPath := placeClaim(t, entry, claimRecord{PID: os.Getpid(), Host: host, Token: "other"}, 0)
			done := make(chan *Result, 1)
			go func() {
				r, err := c.ReplayCached(context.Background(), concurrentArgs...)
				if err != nil {
					t.Errorf("ReplayCached: %v", err)
				}
				done <- r
			}()
			time.Sleep(300 * time.Millisecond)
			if n := jobCount(t, c); n != 0 {
				t.Fatalf("while another process holds the claim, the engine got %d jobs, want none", n)
			}
			st, err := c.Submit(context.Background(), concurrentArgs...)
			if err != nil {
				t.Fatal(err)
			}
			if err := writePending(entry, st.ID); err != nil {
				t.Fatal(err)
			}
			if release {
				os.Remove(claimPath)
			}
			var r *Result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("still waiting 30s after the other process named its job")
			}
			defer r.Release()
			if r == nil || r.Status.ID != st.ID || r.Tokens().NumRows() == 0 {
				t.Fatalf("got %+v, want the other process's job %s with rows", r, st.ID)
			}
			if n := jobCount(t, c); n != 1 {
				t.Errorf("the engine has %d jobs, want the other process's one", n)
			}
		})
	}
	t.Run("context ends", func(t *testing.T) {
		t.Setenv(EnvCache, t.TempDir())
		c := connectSlow(t, -1, 1)[0]
		entry := entryOf(t, c, concurrentArgs...)
		claimPath := placeClaim(t, entry, claimRecord{PID: os.Getpid(), Host: host, Token: "other"}, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := c.ReplayCached(ctx, concurrentArgs...)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "nothing submitted") {
			t.Errorf("got %v, want the context's error, nothing submitted", err)
		}
		if n := jobCount(t, c); n != 0 {
			t.Errorf("the engine has %d jobs, want none", n)
		}
		if rec, err := readClaim(claimPath); err != nil || rec.Token != "other" {
			t.Errorf("the other process's claim: %+v, %v; want it left as it was", rec, err)
		}
	})
}

// A claim whose process died before it named a job is taken over, with a message: at once when the
// process was on this host and is gone, after claimStale when it is of another host or cannot be read.
func TestReplayCachedStaleClaim(t *testing.T) {
	host, _ := os.Hostname()
	for _, tt := range []struct {
		name string
		rec  claimRecord
		age  time.Duration
		why  string
	}{
		// no process has the largest pid (Linux's pid_max is at most 2^22)
		{"process gone", claimRecord{PID: math.MaxInt32, Host: host, Token: "dead"}, 0, "is gone"},
		{"other host, too old", claimRecord{PID: os.Getpid(), Host: "elsewhere", Token: "old"}, claimStale + time.Minute, "old (stale after"},
		{"half written, too old", claimRecord{}, claimStale + time.Minute, "old (stale after"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.rec.PID == math.MaxInt32 && !alive(os.Getpid()) {
				t.Skip("pids cannot be probed here")
			}
			t.Setenv(EnvCache, t.TempDir())
			var said strings.Builder
			cacheWarnings = &said
			defer func() { cacheWarnings = os.Stderr }()
			c := connectSlow(t, -1, 1)[0]
			entry := entryOf(t, c, concurrentArgs...)
			claimPath := placeClaim(t, entry, tt.rec, tt.age)
			if tt.rec.Token == "" {
				os.WriteFile(claimPath, []byte(`{"pid": `), 0o600)
				at := time.Now().Add(-tt.age)
				os.Chtimes(claimPath, at, at)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := c.ReplayCached(ctx, concurrentArgs...)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Release()
			if r.FromCache || r.Tokens().NumRows() == 0 || jobCount(t, c) != 1 {
				t.Errorf("from cache %v, %d rows, %d jobs: want one fresh replay", r.FromCache, r.Tokens().NumRows(), jobCount(t, c))
			}
			if !strings.Contains(said.String(), "taking over the claim") || !strings.Contains(said.String(), tt.why) {
				t.Errorf("said %q, want the take-over, %q", said.String(), tt.why)
			}
			if _, err := os.Stat(claimPath); !os.IsNotExist(err) {
				t.Errorf("claim after the replay: %v, want none", err)
			}
		})
	}
}

// Two calls that find one claim stale at once take it over once: the second to move the name aside
// finds the first's fresh claim there and puts it back.
func TestTakeOverOnce(t *testing.T) {
	dir := t.TempDir()
	path := placeClaim(t, dir, claimRecord{Token: "stale"}, time.Hour)
	seen, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	why, data := staleClaim(path, seen)
	if why == "" {
		t.Fatal("an hour-old claim is not stale")
	}
	if !takeOver(path, seen, data) {
		t.Fatal("the first take-over failed")
	}
	cl, err := claimEntry(dir)
	if err != nil {
		t.Fatal(err)
	}
	if takeOver(path, seen, data) { // the second call, with its stale view (the new file may reuse the inode)
		t.Error("the second take-over removed the fresh claim")
	}
	if rec, err := readClaim(path); err != nil || rec.Token != cl.token {
		t.Errorf("claim after the second take-over: %+v, %v; want the fresh one", rec, err)
	}
	if _, err := claimEntry(dir); !errors.Is(err, errClaimed) {
		t.Errorf("claim while held: %v, want errClaimed", err)
	}
	cl.release()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("after release: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("files left: %v", left)
	}
}

// Calls that judge one stale claim at once, each then taking it over or claiming the entry, leave
// exactly one holder: under the take-over lock each judges the claim again, so none moves another's
// fresh claim aside (where a third call's claim would then make two holders). Rounds of eight calls, in
// one process: flock's locks exclude each other's open files there too.
func TestTakeOverStaleOneHolder(t *testing.T) {
	if !filelock.Supported {
		t.Skip("no file locks here: take-overs are not serialized")
	}
	for round := range 50 {
		dir := t.TempDir()
		path := placeClaim(t, dir, claimRecord{Token: "stale"}, time.Hour)
		var (
			mu      sync.Mutex
			holders []*claim
			took    int
			start   = make(chan struct{})
			wg      sync.WaitGroup
		)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				info, err := os.Stat(path)
				if err == nil {
					if why, _ := staleClaim(path, info); why != "" {
						if _, ok := takeOverStale(dir, path); ok {
							mu.Lock()
							took++
							mu.Unlock()
						}
					}
				}
				if cl, err := claimEntry(dir); err == nil {
					mu.Lock()
					holders = append(holders, cl)
					mu.Unlock()
				} else if !errors.Is(err, errClaimed) {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if took != 1 || len(holders) != 1 {
			t.Fatalf("round %d: %d take-overs, %d holders; want one of each", round, took, len(holders))
		}
		if rec, err := readClaim(path); err != nil || rec.Token != holders[0].token {
			t.Fatalf("round %d: claim %+v, %v; want the holder's", round, rec, err)
		}
		holders[0].release()
		left, _ := filepath.Glob(filepath.Join(dir, "*"))
		left = slices.DeleteFunc(left, func(p string) bool { return filepath.Base(p) == takeOverName })
		if len(left) != 0 {
			t.Fatalf("round %d: files left: %v", round, left)
		}
	}
}

// waitFor polls cond for up to 30 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 300 {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("condition not met in 30s")
}
