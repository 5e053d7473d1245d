package server

import (
	"context"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// A client that hangs up in the middle of a large table (10 MB of hidden states, more than the socket
// buffers hold) has not fetched it: the job keeps it and its keep period does not start; fetched again
// in full, it counts as fetched.
func TestTableHangUpIsNotAFetch(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	var inputs []api.Input
	for i := range 24 {
		inputs = append(inputs, api.Input{Tokens: seq(13*i, 100)})
	}
	req := api.Request{Inputs: inputs, Options: api.Options{Hidden: []int{0, 1, 2, 3, 4, 5, 6, 7}}}
	id := ts.waitState(t, ts.submit(t, req).ID, api.StateDone).ID

	ctx, hangUp := context.WithCancel(context.Background())
	hr, _ := http.NewRequestWithContext(ctx, "GET", ts.url+api.TablePath(id, "hidden"), nil)
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	hangUp()
	resp.Body.Close()
	// The server notices when its next write fails; the status must never say fetched.
	ts.table(t, id, "tokens")
	st := ts.status(t, id)
	if slices.Contains(st.Fetched, "hidden") || st.Expires != nil {
		t.Fatalf("after a hang-up mid-table: fetched %v, expires %v", st.Fetched, st.Expires)
	}
	if tab := ts.table(t, id, "hidden"); tab.NumRows() != 2400*8 {
		t.Errorf("the hidden table fetched again has %d rows, want %d", tab.NumRows(), 2400*8)
	}
	if st := ts.status(t, id); !slices.Contains(st.Fetched, "hidden") || st.Expires == nil {
		t.Errorf("after the full fetch: fetched %v, expires %v", st.Fetched, st.Expires)
	}
}

// A client that read all but the last megabyte of a 10 MB table and hung up has not fetched it, though
// the server wrote the whole stream (the rest fit in the sockets' buffers): before, that counted as
// fetched and started the keep period. Only the client's confirmation (api.ReceivedPath) counts, and it
// is refused for a table the server did not send to its end.
func TestTableReadAlmostToTheEndIsNotAFetch(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	var inputs []api.Input
	for i := range 24 {
		inputs = append(inputs, api.Input{Tokens: seq(13*i, 100)})
	}
	req := api.Request{Inputs: inputs, Options: api.Options{Hidden: []int{0, 1, 2, 3, 4, 5, 6, 7}}}
	id := ts.waitState(t, ts.submit(t, req).ID, api.StateDone).ID
	if code, _ := ts.do(t, "POST", api.ReceivedPath(id, "hidden"), ""); code != http.StatusConflict {
		t.Errorf("confirming a table never sent: %d, want 409", code)
	}
	resp, err := (&http.Client{Transport: &http.Transport{}}).Get(ts.url + api.TablePath(id, "hidden"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The same stream again, read to within 1 MB of its end, then dropped.
	resp, err = (&http.Client{Transport: &http.Transport{}}).Get(ts.url + api.TablePath(id, "hidden"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, len(body)-1<<20)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	time.Sleep(100 * time.Millisecond) // the server finishes its writes into the buffers
	if st := ts.status(t, id); slices.Contains(st.Fetched, "hidden") || st.Expires != nil {
		t.Errorf("after reading %d of %d bytes: fetched %v, expires %v", len(body)-1<<20, len(body), st.Fetched, st.Expires)
	}
	ts.table(t, id, "hidden") // read to the end and confirmed
	ts.table(t, id, "tokens")
	if st := ts.status(t, id); !slices.Contains(st.Fetched, "hidden") || st.Expires == nil {
		t.Errorf("after full reads confirmed: fetched %v, expires %v", st.Fetched, st.Expires)
	}
}
