package tokenizer

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// byteLines is a valid tiktoken.model body for the 256 single bytes (lines 1..256).
func byteLines() string {
	var b strings.Builder
	for i := range 256 {
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString([]byte{byte(i)}), i)
	}
	return b.String()
}

func TestReadTiktokenErrors(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name string
		body string
		want string // substring of the error; "" for success
	}{
		{"valid", byteLines() + b64("ab") + " 256\n", ""},
		{"blank lines and CRLF", byteLines() + "\r\n" + b64("ab") + " 256\r\n\n", ""},
		{"out of order", b64("ab") + " 256\n" + byteLines(), ""},
		{"bad base64", byteLines() + "!!!! 256\n", "x.model:257: bad base64"},
		{"one field", byteLines() + b64("ab") + "\n", "x.model:257: want \"BASE64 RANK\", got 1 fields"},
		{"bad rank", byteLines() + b64("ab") + " -3\n", "x.model:257: bad rank \"-3\""},
		{"duplicate rank", byteLines() + b64("ab") + " 7\n", "x.model:257: duplicate rank 7 (also on line 8)"},
		{"duplicate bytes", byteLines() + b64("a") + " 256\n", "x.model:257: token \"a\" already has a rank on line 98"},
		{"gap", byteLines() + b64("ab") + " 257\n", "ranks have a gap: no line gives rank 256; rank 255 is on line 256; line 257 gives rank 257, past the 257 tokens the file holds"},
		{"missing byte", strings.Replace(byteLines(), b64("\x07")+" 7\n", b64("ab")+" 7\n", 1), "single-byte token 0x07 is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tokens, err := ReadTiktoken(strings.NewReader(tt.body), "x.model")
			if tt.want == "" {
				if err != nil || len(tokens) != 257 || tokens[256] != "ab" {
					t.Fatalf("got %d tokens, %v", len(tokens), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v, want one containing %q and wrapping ErrFormat", err, tt.want)
			}
		})
	}
}

func TestReadConfig(t *testing.T) {
	k3, err := K3Config(1000).JSON(1000)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		json string
		want string // error substring; "" for success
	}{
		{"k3", string(k3), ""},
		{"token objects", `{"added_tokens_decoder": {"1000": {"content": "[BOS]", "special": true}},
			"bos_token": {"content": "[BOS]", "__type": "AddedToken"}, "eos_token": null}`, ""},
		{"syntax", "{\n  \"added_tokens_decoder\": {\n    \"1000\": {\"content\": \"[BOS]\",}\n  }\n}", "c.json: line 3, column 34"},
		{"type", `{"added_tokens_decoder": {"1000": {"content": 5}}}`, "c.json: line 1, column"},
		{"id below", `{"added_tokens_decoder": {"999": {"content": "x"}}}`, `key "999" is not an id in [1000, 1256)`},
		{"id above", `{"added_tokens_decoder": {"1256": {"content": "x"}}}`, `key "1256"`},
		{"not an id", `{"added_tokens_decoder": {"abc": {"content": "x"}}}`, `key "abc"`},
		{"no content", `{"added_tokens_decoder": {"1000": {"special": true}}}`, "added token 1000 has no content"},
		{"duplicate", `{"added_tokens_decoder": {"1000": {"content": "x"}, "1001": {"content": "x"}}}`, `added tokens 1000 and 1001 are both "x"`},
		{"reserved clash", `{"added_tokens_decoder": {"1000": {"content": "<|reserved_token_1001|>"}}}`, "reserved name of slot 1001"},
		{"bad token field", `{"bos_token": 7}`, "bos_token: want a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ReadConfig([]byte(tt.json), "c.json", 1000)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrFormat) {
					t.Fatalf("error %v, want one containing %q and wrapping ErrFormat", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Specials[0] != "[BOS]" || cfg.BOS != "[BOS]" || cfg.Specials[2] == "" {
				t.Errorf("got specials %q... BOS %q", cfg.Specials[:3], cfg.BOS)
			}
		})
	}
}

func TestK3ConfigRoundTrip(t *testing.T) {
	want := K3Config(163584)
	data, err := want.JSON(163584)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadConfig(data, "k3.json", 163584)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Specials, want.Specials) || got.BOS != want.BOS || got.EOS != want.EOS || got.PAD != want.PAD || got.UNK != want.UNK {
		t.Errorf("round trip differs:\n-want %+v\n+got  %+v", want, got)
	}
}

// TestLoadK3Shape writes the full K3 shape and checks the ids the spec lists.
func TestLoadK3Shape(t *testing.T) {
	dir := t.TempDir()
	if err := WriteModelFiles(dir, 163584); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.NumBPE() != 163584 || tok.VocabSize() != 163840 {
		t.Fatalf("NumBPE %d, VocabSize %d", tok.NumBPE(), tok.VocabSize())
	}
	for name, want := range map[string]int32{
		"[BOS]": 163584, "[EOS]": 163585, "<|end_of_msg|>": 163586, "<|open|>": 163587, "<|close|>": 163588,
		"<|sep|>": 163589, "[start_header_id]": 163590, "[end_header_id]": 163591, "[EOT]": 163593,
		"<|media_begin|>": 163602, "<|media_content|>": 163603, "<|media_end|>": 163604, "<|media_pad|>": 163605,
		"[UNK]": 163838, "[PAD]": 163839, "<|reserved_token_163592|>": 163592,
	} {
		if got, ok := tok.SpecialID(name); !ok || got != want {
			t.Errorf("SpecialID(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
	if tok.BOS() != 163584 || tok.EOS() != 163585 || tok.PAD() != 163839 || tok.UNK() != 163838 {
		t.Errorf("BOS %d EOS %d PAD %d UNK %d", tok.BOS(), tok.EOS(), tok.PAD(), tok.UNK())
	}
	want, _ := BuiltinTokens(163584)
	if !slices.Equal(tok.Tokens(), want) {
		t.Error("loaded tokens differ from BuiltinTokens")
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), ModelFile) {
		t.Errorf("missing model: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ModelFile), []byte(byteLines()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), ConfigFile) {
		t.Errorf("missing config: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"bos_token": "[NOPE]"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `"[NOPE]"`) {
		t.Errorf("unknown bos: %v", err)
	}
}
