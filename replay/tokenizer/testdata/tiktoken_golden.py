#!/usr/bin/env python3
"""Expected token ids of the golden corpus, computed by OpenAI's tiktoken (no Go needed).

Run from the repository root on a machine with tiktoken (0.14 was the version at hand):

    python3 replay/tokenizer/testdata/tiktoken_golden.py \\
        replay/tokenizer/testdata/golden.tiktoken.model \\
        replay/tokenizer/testdata/tiktoken_corpus.jsonl.gz \\
        replay/tokenizer/testdata/tiktoken_golden_ids.txt.gz

It reads a vocabulary in tiktoken.model format (plain or .gz) and a corpus (JSON lines, one string per
line, plain or .gz), and writes one line per string: the ids, space-separated, after a first line
"# tiktoken=VERSION vocab_sha256=HEX corpus_sha256=HEX strings=N" (checksums of the uncompressed
inputs). The ids are what Kimi's tokenizer computes with specials disabled: its long-input rule
(kimi_split below, from tokenization_kimi.py), then tiktoken's encode_ordinary on each part, with the K3
pattern and the vocabulary as mergeable ranks. Go's TestTiktokenGolden compares its own ids with them.

Two more modes need no tiktoken:
    --self-test                        checks the parts of this script that do not need tiktoken
    --pieces-with-regex OUT CORPUS     writes the pre-tokenizer pieces as code-point lengths, computed with
                                       the third-party `regex` module (mrab-regex) as an independent
                                       backtracking engine; TestRegexPieces compares them with Go's.
    --ids-with-python-bpe VOCAB CORPUS OUT
                                       writes ids in the golden format from mrab-regex pieces and a
                                       pure-Python merge loop: a cross-check where tiktoken is missing.
"""
import base64
import gzip
import hashlib
import json
import sys

# The K3 pre-tokenizer pattern, exactly as Go's tokenizer.Pattern (TestGoldenScriptPattern checks it).
PAT = r"""[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

# tokenization_kimi.py's limits.
TIKTOKEN_MAX_ENCODE_CHARS = 400_000
MAX_NO_WHITESPACES_CHARS = 25_000


def read_maybe_gzip(path):
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def load_ranks(data):
    """Parses tiktoken.model bytes into {token bytes: rank}, checking what tiktoken would not."""
    ranks = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"line {lineno}: want 'BASE64 RANK'")
        token, rank = base64.b64decode(fields[0], validate=True), int(fields[1])
        if token in ranks:
            raise ValueError(f"line {lineno}: duplicate token {token!r}")
        ranks[token] = rank
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError("ranks are not 0..n-1")
    return ranks


def split_whitespaces_or_nonwhitespaces(s, max_consecutive_slice_len):
    """tokenization_kimi.py's _split_whitespaces_or_nonwhitespaces, unchanged in behaviour."""
    current_slice_len = 0
    current_slice_is_space = s[0].isspace() if len(s) > 0 else False
    slice_start = 0
    for i in range(len(s)):
        is_now_space = s[i].isspace()
        if current_slice_is_space ^ is_now_space:
            current_slice_len = 1
            current_slice_is_space = is_now_space
        else:
            current_slice_len += 1
            if current_slice_len > max_consecutive_slice_len:
                yield s[slice_start:i]
                slice_start = i
                current_slice_len = 1
    yield s[slice_start:]


def kimi_split(text):
    """The substrings tokenization_kimi.py's encode hands to tiktoken one by one."""
    return [
        substr
        for i in range(0, len(text), TIKTOKEN_MAX_ENCODE_CHARS)
        for substr in split_whitespaces_or_nonwhitespaces(text[i:i + TIKTOKEN_MAX_ENCODE_CHARS], MAX_NO_WHITESPACES_CHARS)
    ]


def read_corpus(path):
    data = read_maybe_gzip(path)
    # Split on LF only: str.splitlines would also split inside strings at U+0085, U+2028, U+001C...
    return data, [json.loads(line) for line in data.decode("utf-8").split("\n") if line]


def write_gzip(path, text):
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
        g.write(text.encode("utf-8"))


def golden(vocab_path, corpus_path, out_path):
    import tiktoken  # only this mode needs it

    vocab = read_maybe_gzip(vocab_path)
    corpus_bytes, corpus = read_corpus(corpus_path)
    enc = tiktoken.Encoding("k3-golden", pat_str=PAT, mergeable_ranks=load_ranks(vocab), special_tokens={})
    lines = [
        f"# tiktoken={tiktoken.__version__} vocab_sha256={hashlib.sha256(vocab).hexdigest()} "
        f"corpus_sha256={hashlib.sha256(corpus_bytes).hexdigest()} strings={len(corpus)}"
    ]
    for text in corpus:
        ids = []
        for part in kimi_split(text):
            ids.extend(enc.encode_ordinary(part))
        lines.append(" ".join(map(str, ids)))
    write_gzip(out_path, "\n".join(lines) + "\n")
    print(f"wrote {len(corpus)} id lists to {out_path}")


def regex_pattern():
    """PAT in mrab-regex's V1 syntax, with the properties spelled so that no default can differ:
    Script=Han (not Script_Extensions), White_Space for \\s."""
    p = PAT.replace(r"\p{Han}", r"\p{Script=Han}").replace(r"\S", r"\P{White_Space}").replace(r"\s", r"\p{White_Space}")
    return p


def pieces_with_regex(out_path, corpus_path):
    import regex

    pat = regex.compile(regex_pattern(), flags=regex.V1)
    corpus_bytes, corpus = read_corpus(corpus_path)
    lines = [f"# regex={regex.__version__} corpus_sha256={hashlib.sha256(corpus_bytes).hexdigest()} strings={len(corpus)}"]
    for text in corpus:
        lengths = []
        for part in kimi_split(text):
            pos = 0
            for m in pat.finditer(part):
                if m.start() != pos:
                    raise ValueError(f"gap before {m.start()} in {part[:40]!r}")
                lengths.append(m.end() - m.start())
                pos = m.end()
            if pos != len(part):
                raise ValueError(f"unmatched tail in {part[:40]!r}")
        lines.append(" ".join(map(str, lengths)))
    write_gzip(out_path, "\n".join(lines) + "\n")
    print(f"wrote {len(corpus)} piece lists to {out_path}")


def bpe_heap(piece, ranks):
    """tiktoken's byte_pair_merge result (merge the adjacent pair whose concatenation has the lowest rank,
    leftmost on ties) computed with a heap and a linked list, so long pieces stay fast in Python."""
    import heapq

    n = len(piece)
    if piece in ranks:
        return [ranks[piece]]
    nxt = list(range(1, n + 2))
    prv = list(range(-1, n))
    alive = [True] * (n + 1)
    cur = [None] * (n + 1)

    def pair_rank(i):
        j = nxt[i]
        if j >= n:
            return None
        return ranks.get(piece[i:nxt[j]])

    heap = []
    for i in range(n - 1):
        cur[i] = pair_rank(i)
        if cur[i] is not None:
            heap.append((cur[i], i))
    heapq.heapify(heap)
    while heap:
        rank, i = heapq.heappop(heap)
        if not alive[i] or cur[i] != rank:
            continue
        j = nxt[i]
        alive[j] = False
        nxt[i] = nxt[j]
        prv[nxt[j]] = i
        for k in (i, prv[i]):
            if k >= 0:
                cur[k] = pair_rank(k)
                if cur[k] is not None:
                    heapq.heappush(heap, (cur[k], k))
    out, i = [], 0
    while i < n:
        out.append(ranks[piece[i:nxt[i]]])
        i = nxt[i]
    return out


def ids_with_python_bpe(vocab_path, corpus_path, out_path):
    """Like golden, without tiktoken: mrab-regex splits, bpe_heap merges. A local cross-check only."""
    import regex

    vocab = read_maybe_gzip(vocab_path)
    ranks = load_ranks(vocab)
    pat = regex.compile(regex_pattern(), flags=regex.V1)
    corpus_bytes, corpus = read_corpus(corpus_path)
    lines = [
        f"# python-bpe regex={regex.__version__} vocab_sha256={hashlib.sha256(vocab).hexdigest()} "
        f"corpus_sha256={hashlib.sha256(corpus_bytes).hexdigest()} strings={len(corpus)}"
    ]
    for text in corpus:
        ids = []
        for part in kimi_split(text):
            for m in pat.finditer(part):
                ids.extend(bpe_heap(m.group().encode("utf-8"), ranks))
        lines.append(" ".join(map(str, ids)))
    write_gzip(out_path, "\n".join(lines) + "\n")
    print(f"wrote {len(corpus)} id lists to {out_path}")


def self_test():
    cases = [
        ("", []),
        ("a" * 25_000, [25_000]),
        ("a" * 25_001, [25_000, 1]),
        (" " * 25_001 + "x", [25_000, 2]),
        ("a" * 24_999 + "\x1c" + "aa", [25_002]),  # Python's isspace counts U+001C
        ("a" * 24_999 + "!" + "aa", [25_000, 2]),
        ("ab " * 133_335, [400_000, 5]),
    ]
    for text, want in cases:
        got = [len(p) for p in kimi_split(text)]
        assert got == want, (text[:10], got, want)
        assert "".join(kimi_split(text)) == text
    body = "".join(f"{base64.b64encode(bytes([b])).decode()} {b}\n" for b in range(256)) + "YWI= 256\n"
    assert load_ranks(body.encode())[b"ab"] == 256
    for bad in [body + "YWI= 257\n", body.replace(" 256\n", " 300\n"), body + "!!!! 257\n"]:
        try:
            load_ranks(bad.encode())
        except ValueError:
            continue
        raise AssertionError("load_ranks accepted a bad vocabulary")
    print("self-test ok")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
    elif len(argv) == 4 and argv[1] == "--pieces-with-regex":
        pieces_with_regex(argv[2], argv[3])
    elif len(argv) == 5 and argv[1] == "--ids-with-python-bpe":
        ids_with_python_bpe(argv[2], argv[3], argv[4])
    elif len(argv) == 4:
        golden(argv[1], argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
