package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/kernel/server"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

func init() {
	commands["tokenize"] = command{"show the tokens of text or chat conversations: id, piece, message, channel", runTokenize}
}

// tokenizeUsage is the head of `potato help tokenize`. Its conversation runs as written (TestTokenizeUsage):
// it gives its thinking mode, which a thinking_effort needs on.
const tokenizeUsage = `usage: potato tokenize [--model DIR] (--text STRING [--special] | --text-file FILE | --chat FILE [--thinking on|off])

Prints one row per token: position, id, piece, message and channel. A conversation line looks like
{"messages": [{"role": "user", "content": "Hi"}], "thinking": true, "thinking_effort": "high", "add_generation_prompt": true}
(a thinking_effort needs thinking on; a line without "thinking" takes --thinking's mode).
`

// runTokenize parses `potato tokenize [--model DIR] (--text STRING [--special] | --text-file FILE | --chat
// FILE [--thinking on|off])`; without --model, the embedded default, as for every other command.
func runTokenize(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("tokenize", tokenizeUsage)
	model := fs.String("model", "", "model directory with tiktoken.model and tokenizer_config.json (default: the embedded demo model, a small K3 trained on text)")
	text := fs.String("text", "", "raw text to tokenize (no BOS is added)")
	textFile := fs.String("text-file", "", "file of raw text to tokenize, - for stdin")
	special := fs.Bool("special", false, "with --text: names of special tokens such as <|open|> become special ids")
	chat := fs.String("chat", "", "file of conversations: JSONL (one a line), a JSON array, or Parquet (- for JSONL on stdin)")
	thinking := fs.String("thinking", "", "with --chat: on or off, the thinking mode of the conversations that do not give theirs (needed when one does not; a conversation that gives the other mode is refused)")
	maxTokens := fs.Int("max-tokens", server.DefaultLimits.MaxSequenceTokens, "most tokens of the text or of one conversation (as potato replay); a longer one is refused (text is tokenized only up to the limit)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	textSet := false
	fs.Visit(func(f *flag.Flag) { textSet = textSet || f.Name == "text" })
	given := 0
	for _, set := range []bool{textSet, *textFile != "", *chat != ""} {
		if set {
			given++
		}
	}
	switch {
	case fs.NArg() > 0:
		return usagef("tokenize", "tokenize: unexpected argument %q (the input is given by --text, --text-file or --chat)", fs.Arg(0))
	case given != 1:
		return usagef("tokenize", "tokenize: exactly one of --text, --text-file or --chat is required")
	case *thinking != "" && *chat == "": // as replay: text has no thinking mode, and the flag would be dropped
		return errors.New("tokenize: --thinking is for --chat (text has no thinking mode)")
	}
	if err := checkThinkingFlag("tokenize", *thinking); err != nil {
		return err
	}
	if *maxTokens <= 0 {
		return fmt.Errorf("tokenize: --max-tokens %d must be positive", *maxTokens)
	}
	if *textFile != "" { // read once the tokenizer says how much of it --max-tokens can take (textfile.go)
		if _, err := checkTextFile("tokenize", *textFile); err != nil {
			return err
		}
	}
	dir, err := modelDir(ctx, *model)
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	if *textFile != "" {
		if *text, err = readTextFile("tokenize", *textFile, os.Stdin, tok, *maxTokens, "--max-tokens"); err != nil {
			return err
		}
		textSet = true
	}
	if textSet {
		tokens, ok := tok.EncodeTextLimit(*text, *special, *maxTokens)
		if !ok {
			return fmt.Errorf("tokenize: the text has more than %d tokens: the limit is %d (--max-tokens)", *maxTokens, *maxTokens)
		}
		return printTokens(stdout, tok, tokens)
	}
	return tokenizeChats(ctx, stdout, tok, *chat, *thinking, *maxTokens)
}

// tokenizeChats prints the tokens of every conversation in a JSONL or Parquet file (- for JSONL on stdin).
// --thinking fills in the mode of conversations that do not give theirs, as in potato replay. A file
// without conversations, or a conversation past limit tokens, is an error naming it.
func tokenizeChats(ctx context.Context, w io.Writer, tok *tokenizer.Tokenizer, path, thinking string, limit int) error {
	var convs []tokenizer.Conversation
	var err error
	if path == "-" {
		convs, err = datasets.ReadJSONL(os.Stdin, "stdin")
	} else {
		convs, err = datasets.Load(path)
	}
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	if len(convs) == 0 {
		return fmt.Errorf("tokenize: %s holds no conversations", path)
	}
	if err := applyThinking(convs, thinking); err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	for i, c := range convs {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Rendered only up to the limit: a conversation far past it is refused after limit+1 tokens.
		tokens, ok, err := tok.EncodeConversationLimit(c, limit)
		if err != nil {
			return fmt.Errorf("tokenize: %s: conversation %d: %w", path, i+1, err)
		}
		id := c.ID
		if id == "" {
			id = strconv.Itoa(i + 1)
		}
		if !ok {
			return fmt.Errorf("tokenize: %s: conversation %d (id %q) has more than %d tokens: the limit is %d (--max-tokens)", path, i+1, id, limit, limit)
		}
		fmt.Fprintf(w, "# conversation %s: %s, %s\n", id, numtext.Count(len(c.Messages), "message"), numtext.Count(len(tokens), "token"))
		if err := printTokens(w, tok, tokens); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	return nil
}

// printRowsAligned is how many rows printTokens aligns at once: a tabwriter holds every row until it
// flushes, and a million rows held at once took hundreds of MB; columns may widen from block to block.
const printRowsAligned = 4096

// printTokens writes one row per token: position, id, the piece in backquotes (control characters escaped,
// partial UTF-8 bytes as <0xNN>), the message index (- for none) and the channel.
func printTokens(w io.Writer, tok *tokenizer.Tokenizer, tokens []tokenizer.Token) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pos\tid\tpiece\tmessage\tchannel")
	for i, t := range tokens {
		if i > 0 && i%printRowsAligned == 0 {
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		msg := "-"
		if t.Message >= 0 {
			msg = strconv.Itoa(t.Message)
		}
		fmt.Fprintf(tw, "%d\t%d\t`%s`\t%s\t%s\n", i, t.ID, tok.Piece(t.ID), msg, t.Channel)
	}
	return tw.Flush()
}
