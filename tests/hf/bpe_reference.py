"""Byte-level BPE (GPT-2's) written here from its definition, to check loom's: GPT-2's pre-token
pattern run by Python's own regex engine, with \\p{L} and \\p{N} spelled out from Python's Unicode
database and \\s as Unicode's White_Space; GPT-2's byte-to-character table; merges applied by rank.
Also a small trainer, so the test has a vocabulary and merges of its own."""
import collections
import json
import re
import sys
import unicodedata

WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"


def _class_of(prefix):
    """A regex character class of every code point whose general category starts with `prefix`."""
    ranges, start, prev = [], None, None
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        if unicodedata.category(chr(c)).startswith(prefix):
            if start is None:
                start = c
            prev = c
        elif start is not None:
            ranges.append((start, prev))
            start = None
    if start is not None:
        ranges.append((start, prev))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


_L, _N = _class_of("L"), _class_of("N")
_S = "".join(re.escape(c) for c in WHITE_SPACE)
PATTERN = re.compile(rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{_L}]+| ?[{_N}]+| ?[^{_S}{_L}{_N}]+|[{_S}]+(?![^{_S}])|[{_S}]+")


def byte_chars():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


BYTE_CHARS = byte_chars()


def pre_tokens(text):
    return PATTERN.findall(text)


def merge(parts, a, b):
    """`parts` with every adjacent (a, b), left to right, made one piece."""
    out, i = [], 0
    while i < len(parts):
        if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(parts[i])
            i += 1
    return out


def bpe(word, ranks):
    parts = list(word)
    while len(parts) > 1:
        pairs = [(ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(parts, parts[1:])) if (a, b) in ranks]
        if not pairs:
            break
        rank = min(pairs)[0]
        a, b = next(p for p, r in ranks.items() if r == rank)
        parts = merge(parts, a, b)
    return parts


def encode(text, vocab, merges, added=()):
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
    ids = []
    for chunk in re.split("(" + "|".join(map(re.escape, sorted(added, key=len, reverse=True))) + ")", text) if added else [text]:
        if chunk in added:
            ids.append(vocab[chunk])
            continue
        for word in pre_tokens(chunk):
            ids += [vocab[p] for p in bpe("".join(BYTE_CHARS[b] for b in word.encode()), ranks)]
    return ids


def train(text, merges_wanted):
    """vocab (the 256 byte characters, then each merge's piece) and merges from `text`'s pre-tokens."""
    words = collections.Counter(tuple(BYTE_CHARS[b] for b in w.encode()) for w in pre_tokens(text))
    vocab = {BYTE_CHARS[b]: b for b in range(256)}
    merges = []
    while len(merges) < merges_wanted:
        pairs = collections.Counter()
        for w, n in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        vocab.setdefault(a + b, len(vocab))
        new = collections.Counter()
        for w, n in words.items():
            new[tuple(merge(w, a, b))] += n
        words = new
    return vocab, merges
