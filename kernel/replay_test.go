package kernel

import (
	"bytes"
	"context"
	"errors"
	"html"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/kernel/server"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// Replay of text, a conversation and token ids returns every table asked for, equal to a solo replay,
// and the HTML shows the tokens table's rows.
func TestReplayTables(t *testing.T) {
	c, err := Connect(WithAddr(startServer(t, "127.0.0.1:0", server.Config{})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conv := datasets.Examples()[2]
	conv.Thinking = tokenizer.ThinkingOn
	res, err := c.Replay(context.Background(), Text("Hello, world."), Chat(conv), Tokens(1, 2, 3),
		TopK(3), Lens(1, 7), Hidden(2), Router(), AttnRes(), Float16(), Label("all of it"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()

	tk := tok(t)
	text, _ := replay.FromText(tk, "Hello, world.")
	chat, err := replay.FromConversation(tk, conv)
	if err != nil {
		t.Fatal(err)
	}
	want := solo(t, replay.Options{TopK: 3, Lens: []int{1, 7}, Hidden: []int{2}, Router: true, AttnRes: true}, true,
		text, chat, replay.FromIDs(tk, []int32{1, 2, 3}))
	for _, name := range api.Tables {
		sameRecord(t, name, res.Table(name), want.Table(name))
	}
	if res.Tokens() != res.Table("tokens") || res.Lens() == nil || res.Hidden() == nil || res.Router() == nil || res.AttnRes() == nil {
		t.Error("an accessor does not return its table")
	}
	st := res.Status
	if st.State != api.StateDone || st.Sequences != 3 || st.Label != "all of it" || !st.Options.Float16 {
		t.Errorf("status: %+v", st)
	}

	out := res.HTML()
	rows := int(res.Tokens().NumRows())
	if got := strings.Count(out, "<tr>"); got != 1+min(rows, 20) {
		t.Errorf("HTML has %d <tr>, want a header and %d rows", got, min(rows, 20))
	}
	piece := res.Tokens().Column(3).(*array.String).Value(1) // "token", the text of the second piece
	for _, s := range []string{"job " + st.ID, "3 sequences", "tables: tokens, lens, hidden, router, attnres",
		">" + html.EscapeString(`"`+strings.ReplaceAll(piece, " ", "␣")+`"`) + "<", "15 columns (first 20 shown)"} {
		if !strings.Contains(out, s) {
			t.Errorf("HTML lacks %q", s)
		}
	}
	res.Display() // outside a notebook: nothing, and no panic
	res.Release()
	if res.Tokens() != nil {
		t.Error("tables after Release")
	}
}

// Refusals come back as the engine's own message.
func TestReplayErrors(t *testing.T) {
	c, err := Connect(WithAddr(startServer(t, "127.0.0.1:0", server.Config{Limits: api.Limits{MaxSequenceTokens: 200}})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conv := datasets.Examples()[0]
	conv.Thinking = tokenizer.ThinkingUnset
	for _, tt := range []struct {
		args        []Arg
		status      int
		limit, want string
	}{
		{[]Arg{Tokens(1), Lens(99)}, 400, "", "options.lens[0]: layer 99 outside 0..7"},
		{[]Arg{Tokens(1, 4000)}, 400, "", "inputs[0].tokens[1]: token id 4000 outside the vocabulary"},
		{[]Arg{Tokens(make([]int32, 201)...)}, 413, "--max-tokens", "inputs[0] has 201 tokens: the limit is 200 (--max-tokens)"},
		{[]Arg{Tokens(1), Precision("fp16")}, 400, "", `options.precision "fp16"`},
		{[]Arg{Chat(conv)}, 400, "", "inputs[0].conversation: no thinking mode"},
	} {
		_, err := c.Replay(ctx, tt.args...)
		var se *ServerError
		if !errors.As(err, &se) || se.StatusCode != tt.status || se.Limit != tt.limit || !strings.Contains(se.Message, tt.want) {
			t.Errorf("(-want +got):\n-%d %s …%s…\n+%v", tt.status, tt.limit, tt.want, err)
		}
	}
	if _, err := c.Replay(ctx, TopK(3)); err == nil || !strings.Contains(err.Error(), "nothing to replay") {
		t.Errorf("no inputs: %v", err)
	}
	if _, err := c.Replay(ctx, Chat(conv), Thinking(tokenizer.ThinkingOff)); err != nil {
		t.Errorf("thinking for the request: %v", err)
	}
}

// A cell that stops waiting leaves its job on the engine; a later cell fetches it by id. Cancel is the
// only way to stop one.
func TestJobsOutliveTheCell(t *testing.T) {
	var progress bytes.Buffer
	c, err := Connect(WithAddr(startServer(t, "127.0.0.1:0", server.Config{Gather: 500 * time.Millisecond})), WithProgress(&progress))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Submit(context.Background(), Text("left behind"), TopK(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond) // the job waits 500ms to gather
	_, err = c.Wait(ctx, st.ID)
	cancel()
	if err == nil || !strings.Contains(err.Error(), `Fetch(ctx, "`+st.ID+`")`) {
		t.Fatalf("interrupted wait: %v", err)
	}
	if _, err := c.Wait(context.Background(), st.ID); err != nil {
		t.Fatal(err)
	}
	res, err := c.Fetch(context.Background(), st.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	if res.Tokens().NumRows() == 0 || res.Status.ID != st.ID {
		t.Errorf("fetched %d rows of %s", res.Tokens().NumRows(), res.Status.ID)
	}
	if !strings.Contains(progress.String(), "8 of 8 layers done") || !strings.Contains(progress.String(), "done in") {
		t.Errorf("progress lines:\n%s", progress.String())
	}

	queued, err := c.Submit(context.Background(), Tokens(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Cancel(context.Background(), queued.ID); err != nil || st.State != api.StateCancelled {
		t.Fatalf("cancel: %v %v", st.State, err)
	}
	if _, err := c.Wait(context.Background(), queued.ID); err == nil || !strings.Contains(err.Error(), "was cancelled") {
		t.Errorf("waiting on a cancelled job: %v", err)
	}
	var se *ServerError
	if _, err := c.Cancel(context.Background(), queued.ID); !errors.As(err, &se) || se.StatusCode != http.StatusConflict {
		t.Errorf("second cancel: %v", err)
	}
	jobs, err := c.Jobs(context.Background())
	if err != nil || len(jobs) != 2 {
		t.Errorf("jobs: %d, %v", len(jobs), err)
	}
	if err := c.Forget(context.Background(), queued.ID); err != nil {
		t.Error(err)
	}
	if _, err := c.Fetch(context.Background(), queued.ID); !errors.As(err, &se) || se.StatusCode != http.StatusNotFound {
		t.Errorf("fetch after Forget: %v", err)
	}
}
