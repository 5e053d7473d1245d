package kernel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/potato-k3/potato-k3/kernel/server"
	"github.com/potato-k3/potato-k3/replay/demomodel"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// scoredIDs are bundled examples that cover every kind of message: a plain exchange, a tool call with its
// result, reasoning (thinking on), and a thinking-effort block (prime-check: message -1 text).
var scoredIDs = []string{"greeting", "weather-tool", "train-puzzle", "prime-check"}

// MessageLogprob on the demo model equals a hand computation over the raw Arrow columns, and its
// messages add up to the mean `potato replay` prints over "the tokens of the messages".
func TestMessageLogprobDemo(t *testing.T) {
	ctx := context.Background()
	def, err := demomodel.Dir(ctx, nil) // the embedded default, in the test's cache directory
	if err != nil {
		t.Fatal(err)
	}
	c, err := Connect(WithAddr(startServer(t, "127.0.0.1:0", server.Config{ModelDir: def})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Replay(ctx, Example(scoredIDs...))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()

	// By hand, in the shape of the CLI's loop: row t's logprob scores the token of row t+1, counted for
	// message m when that token is m's and not markup.
	tok := res.Tokens()
	col := func(name string) int { return tok.Schema().FieldIndices(name)[0] }
	seq := tok.Column(col("seq_id")).(*array.Int32)
	pos := tok.Column(col("pos")).(*array.Int32)
	ids := tok.Column(col("token_id")).(*array.Int32)
	msg := tok.Column(col("message")).(*array.Int32)
	ch := tok.Column(col("channel")).(*array.String)
	target := tok.Column(col("target_id")).(*array.Int32)
	lp := tok.Column(col("logprob")).(*array.Float32)
	type key struct{ seq, msg int32 }
	sums, counts := map[key]float64{}, map[key]int{}
	effort := map[int32]int{} // thinking-effort text tokens (message -1, not markup) per sequence
	fromMarkup := 0           // own tokens scored on a markup row: each message's first
	for r := 0; r+1 < int(tok.NumRows()); r++ {
		if seq.Value(r+1) != seq.Value(r) || lp.IsNull(r) || ch.Value(r+1) == "structure" {
			continue
		}
		if pos.Value(r+1) != pos.Value(r)+1 || target.Value(r) != ids.Value(r+1) {
			t.Fatalf("row %d: not the row that scores row %d", r, r+1)
		}
		k := key{seq.Value(r), msg.Value(r + 1)}
		if k.msg < 0 {
			effort[k.seq]++
			continue
		}
		sums[k] += float64(lp.Value(r))
		counts[k]++
		if ch.Value(r) == "structure" {
			fromMarkup++
		}
	}
	if len(effort) != 1 || effort[3] == 0 {
		t.Errorf("thinking-effort text tokens per sequence: %v, want some in sequence 3 (prime-check) alone", effort)
	}
	if fromMarkup < len(counts) {
		t.Errorf("%d own tokens scored on a markup row, want at least one a message (%d)", fromMarkup, len(counts))
	}

	total := map[int32]MessageScore{} // every message of a sequence together
	for k, n := range counts {
		got, err := res.MessageLogprob(int(k.seq), int(k.msg))
		if err != nil {
			t.Fatal(err)
		}
		want := MessageScore{Sum: sums[k], Count: n, Mean: sums[k] / float64(n)}
		if got != want {
			t.Errorf("sequence %d message %d: (-want +got)\n-%+v\n+%+v", k.seq, k.msg, want, got)
		}
		tt := total[k.seq]
		tt.Sum += got.Sum
		tt.Count += got.Count
		total[k.seq] = tt
	}
	// every message the table names has a score (none lacks its own tokens in these examples)
	for i := 0; i < int(tok.NumRows()); i++ {
		if k := (key{seq.Value(i), msg.Value(i)}); k.msg >= 0 && counts[k] == 0 {
			t.Errorf("sequence %d message %d: no own token counted", k.seq, k.msg)
		}
	}

	// The CLI on the same conversations: its mean over the messages' tokens is theirs together, plus the
	// thinking-effort text, which belongs to no message.
	cli := cliMessageMeans(t, scoredIDs)
	for s := range int32(len(scoredIDs)) {
		tt := total[s]
		tt.Sum += effortSum(seq, msg, ch, lp, s)
		tt.Count += effort[s]
		want := fmt.Sprintf("%.3f over the %d tokens", tt.Sum/float64(tt.Count), tt.Count)
		if cli[s] != want {
			t.Errorf("sequence %d: potato replay says %q, the messages' scores %q", s, cli[s], want)
		}
	}

	for _, tt := range []struct {
		seq, msg int
		want     string
	}{
		{9, 0, "no sequence 9"},
		{0, 99, "sequence 0 has no message 99"},
		{0, -1, "numbered from 0"},
	} {
		if _, err := res.MessageLogprob(tt.seq, tt.msg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("MessageLogprob(%d, %d): %v, want %q", tt.seq, tt.msg, err, tt.want)
		}
	}
	// SpanLogprob: positions from..to-1 of a sequence, each on the row before it, markup included.
	n0 := 0 // sequence 0's length
	for i := 0; i < int(tok.NumRows()); i++ {
		if seq.Value(i) == 0 {
			n0++
		}
	}
	for _, span := range [][2]int{{1, n0}, {3, 7}, {n0 - 1, n0}} {
		var want MessageScore
		for p := span[0]; p < span[1]; p++ { // sequence 0's rows come first, in position order
			want.Sum += float64(lp.Value(p - 1))
			want.Count++
		}
		want.Mean = want.Sum / float64(want.Count)
		if got, err := res.SpanLogprob(0, span[0], span[1]); err != nil || got != want {
			t.Errorf("SpanLogprob(0, %d, %d): %+v, %v; want %+v", span[0], span[1], got, err, want)
		}
	}
	for _, tt := range []struct {
		seq, from, to int
		want          string
	}{
		{0, 0, 3, "want 1 <= from < to <= "}, {0, 2, n0 + 1, "want 1 <= from < to <= "}, {0, 4, 4, "want 1 <= from"},
		{9, 1, 2, "no sequence 9"},
	} {
		if _, err := res.SpanLogprob(tt.seq, tt.from, tt.to); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("SpanLogprob(%d, %d, %d): %v, want %q", tt.seq, tt.from, tt.to, err, tt.want)
		}
	}
	// A message with no text of its own scores 0 tokens, mean NaN; raw text has no messages at all.
	other, err := c.Replay(ctx, Chat(tokenizer.Conversation{Thinking: tokenizer.ThinkingOff, Messages: []tokenizer.Message{
		{Role: tokenizer.RoleUser, Content: "Say nothing."}, {Role: tokenizer.RoleAssistant}}}), Text("no messages here"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if s, err := other.MessageLogprob(0, 1); err != nil || s.Count != 0 || s.Sum != 0 || !math.IsNaN(s.Mean) {
		t.Errorf("empty reply: %+v, %v; want 0 tokens, mean NaN", s, err)
	}
	for _, tt := range []struct {
		seq, msg int
		want     string
	}{
		{1, 0, "kernel: sequence 1 has no messages: it is raw text or token ids (message -1 on every row), not a conversation"},
		{0, 2, "kernel: sequence 0 has no message 2 (its messages: 0..1; -1 means none: raw text or token ids)"},
	} {
		if _, err := other.MessageLogprob(tt.seq, tt.msg); err == nil || err.Error() != tt.want {
			t.Errorf("MessageLogprob(%d, %d): (-want +got)\n-%s\n+%v", tt.seq, tt.msg, tt.want, err)
		}
	}
}

// effortSum is the sum of the logprobs that score sequence s's tokens of message -1 that are not markup.
func effortSum(seq, msg *array.Int32, ch *array.String, lp *array.Float32, s int32) float64 {
	var sum float64
	for t := 0; t+1 < seq.Len(); t++ {
		if seq.Value(t) == s && seq.Value(t+1) == s && msg.Value(t+1) < 0 && ch.Value(t+1) != "structure" {
			sum += float64(lp.Value(t))
		}
	}
	return sum
}

// cliMessageMeans runs `potato replay --chat` (the binary TestMain built) on the bundled examples ids, on
// the embedded default model, and returns per sequence the "MEAN over the N tokens" of its summary line.
func cliMessageMeans(t *testing.T, ids []string) map[int32]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "datasets", "examples", "examples.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string][]byte{}
	for line := range bytes.Lines(data) {
		var l struct{ ID string }
		if json.Unmarshal(line, &l) == nil {
			byID[l.ID] = line
		}
	}
	var chats []byte
	for _, id := range ids {
		chats = append(chats, byID[id]...)
	}
	path := filepath.Join(t.TempDir(), "chats.jsonl")
	if err := os.WriteFile(path, chats, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(os.Getenv(EnvBin), "replay", "--chat", path, "--show", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("potato replay: %v\n%s", err, out)
	}
	got := map[int32]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "sequence ")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, " ")
		s, err := strconv.Atoi(n)
		_, mean, found := strings.Cut(line, "(")
		_, mean, found2 := strings.Cut(mean, "(") // the second parenthesis: after "(conversation ID)"
		if err != nil || !found || !found2 {
			t.Fatalf("potato replay line %q", line)
		}
		mean, _, _ = strings.Cut(mean, " of the messages")
		got[int32(s)] = mean
	}
	if len(got) != len(ids) {
		t.Fatalf("potato replay printed %d sequence lines, want %d:\n%s", len(got), len(ids), out)
	}
	return got
}
