"""The tokenizer's per-code-point lookup tables, built from the reference's character classes.

The classes (which characters cleaning drops, punctuation, non-spacing marks, combining classes,
lower-casing where the reference's Unicode data differs from Python's, where TF Text's WordPiece
splits differently) are package data, tfbert/text/data/unicode_classes.txt, written by
data_tools/make_tokenizer_tables.py from `tokenizers` 0.23.3 and TF Text 2.21;
tests/test_tokenizer_tables.py checks that regenerating it gives the same file. Whitespace and
the CJK ranges are below. `tables()` turns them into two-level int32 tables (built once per
process, about a second), which `tfbert.text.tokenizer` captures as graph constants.
"""

from __future__ import annotations

import functools
import unicodedata
from importlib import resources

import numpy as np

# The default per-word limit in characters (not bytes): `tokenizers`' and transformers'
# max_input_chars_per_word. Google's tokenization.py uses 200 (BertTokenizer's max_chars_per_word).
MAX_CHARS_PER_WORD = 100

# Bits of the per-code-point info table.
DROP, SPACE, PUNCT, CJK, MARK, UNSAFE = 1, 2, 4, 8, 16, 64
CCC_SHIFT = 7  # canonical combining class, 8 bits
LOWER_SHIFT = 15  # lower-case delta (signed), 17 bits
# Bits of the per-code-point map for lower_case=True (tier one): DROP (cleaned away, or only
# marks after NFD), the classes SPACE, PUNCT, UNSAFE of the mapped character, CJK of the
# code point, COMPLEX (NFD gives several characters, or a combining one that canonical ordering
# may move), and the mapped character's offset from the code point.
COMPLEX = 128
MAP_SHIFT = 8
BLOCK_BITS = 7  # two-level tables: code point >> 7 picks a block of 128 entries


@functools.cache
def sections() -> dict[str, str]:
    """{section name: its items, whitespace separated} of tfbert/text/data/unicode_classes.txt."""
    text = resources.files("tfbert.text").joinpath("data", "unicode_classes.txt").read_text(
        encoding="utf-8")
    out: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]"):
            name = line[1:-1]
            out[name] = []
        elif line and not line.startswith("#") and name is not None:
            out[name].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def code_point_ranges(name: str) -> list[tuple[int, int]]:
    """The (first, last) code point ranges of a section of hex ranges ("dropped", ...)."""
    return parse_ranges(sections()[name])


@functools.cache
def raw_text_pattern(lower_case: bool, max_chars: int = MAX_CHARS_PER_WORD) -> str:
    """A regular expression (RE2) that fully matches the texts tier zero may send to WordPiece
    as they are: made only of characters normalization leaves alone and that TF Text splits as
    the reference does (no characters to clean away or to map, no other whitespace than " "),
    with words of at most `max_chars` characters of ASCII and full-width letters and digits.
    Texts with other word characters (accented or non-Latin letters) take the tiers; punctuation
    and CJK characters are words of one character anyway."""
    t = tables()
    codes = np.arange(0x110000, dtype=np.int64)
    if lower_case:
        index, blocks = t["map_index"], t["map_blocks"]
    else:
        index, blocks = t["info_index"], t["info_blocks"]
    values = blocks[index[codes >> BLOCK_BITS].astype(np.int64) * (1 << BLOCK_BITS)
                    + (codes & ((1 << BLOCK_BITS) - 1))].astype(np.int64)
    unsafe = DROP | UNSAFE | (COMPLEX if lower_case else 0)
    ok = (values & unsafe) == 0
    if lower_case:
        ok &= (values >> MAP_SHIFT) == 0  # lower-casing and NFD leave the character alone
    ok[0xD800:0xE000] = False  # surrogates are not characters of valid UTF-8
    space = (values & SPACE) != 0
    alone = ok & ~space & ((values & (PUNCT | CJK)) != 0)
    alone[0x20] = True  # the one separator WordPiece's own splitting surely treats alike
    # Word characters counted in the pattern: ASCII and the full-width forms. A class of every
    # word character makes the counted repetition too big for RE2's DFA (it falls back to a
    # far slower matcher); texts with other letters take the tiers.
    word = ok & ~space & ~alone & ((codes < 0x80) | ((codes >= 0xFF00) & (codes < 0xFFF0)))

    def char_class(mask: np.ndarray) -> str:
        points = np.nonzero(mask)[0]
        breaks = np.nonzero(np.diff(points) != 1)[0]
        ranges = zip(points[np.r_[0, breaks + 1]], points[np.r_[breaks, len(points) - 1]],
                     strict=True)
        return "[" + "".join(f"\\x{{{lo:x}}}" + (f"-\\x{{{hi:x}}}" if hi > lo else "")
                             for lo, hi in ranges) + "]"

    alone_class, word_class = char_class(alone), char_class(word)
    longest = f"{{1,{max_chars}}}"
    return (f"{alone_class}*(?:{word_class}{longest}{alone_class}+)*"
            f"(?:{word_class}{longest})?")


def parse_ranges(text: str) -> list[tuple[int, int]]:
    """"a-b c" (hex, inclusive) -> [(a, b), (c, c)]."""
    out = []
    for item in text.split():
        lo, _, hi = item.partition("-")
        out.append((int(lo, 16), int(hi or lo, 16)))
    return out


def _two_level(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Splits a per-code-point int32 array into (block index, unique blocks)."""
    blocks = values.reshape(-1, 1 << BLOCK_BITS)
    position: dict[bytes, int] = {}
    unique: list[np.ndarray] = []
    index = np.empty(len(blocks), np.int32)
    for i, block in enumerate(blocks):
        key = block.tobytes()
        if key not in position:
            position[key] = len(unique)
            unique.append(block)
        index[i] = position[key]
    return index, np.concatenate(unique).astype(np.int32)


@functools.cache
def tables() -> dict[str, np.ndarray]:
    """The lookup tables, built once per process (about a second).

    `info` (two-level, per code point): class bits, canonical combining class, lower-case
    delta. `decomp` (two-level): NFD of the code point as (start << 3 | length) into
    `decomp_values`, 0 where NFD leaves it alone. `map` (two-level): tier one's whole
    lower_case=True normalization of the code point (see COMPLEX).
    """
    info = np.zeros(0x110000, np.int64)
    for name, bit in (("dropped", DROP), ("punctuation", PUNCT), ("nonspacing_marks", MARK),
                      ("wordpiece_splits_differ", UNSAFE)):
        for lo, hi in code_point_ranges(name):
            info[lo:hi + 1] |= bit
    for lo, hi in CJK_RANGES:
        info[lo:hi + 1] |= CJK
    info[list(WHITESPACE)] |= SPACE

    decomp = np.zeros(0x110000, np.int64)
    values: list[int] = []

    def decompose(c: int, seq: list[int]) -> None:
        assert 0 < len(seq) < 8, (hex(c), seq)
        decomp[c] = (len(values) << 3) | len(seq)
        values.extend(seq)

    for item in sections()["combining_classes"].split():
        span, _, ccc = item.partition(":")
        lo, hi = parse_ranges(span)[0]
        info[lo:hi + 1] |= int(ccc) << CCC_SHIFT
    overridden = set()
    for lo, hi, target in _overrides():
        for c in range(lo, hi + 1):
            decompose(c, [target + c - lo])
            overridden.add(c)
    # Planes 0-3 and 14 hold every character with case or decomposition.
    for c in [*range(0x40000), *range(0xE0000, 0xE1000)]:
        ch = chr(c)
        if c in overridden:
            continue
        lower = ch.lower()
        if lower != ch and len(lower) == 1:
            info[c] |= (ord(lower) - c) << LOWER_SHIFT
        if not unicodedata.is_normalized("NFD", ch):
            decompose(c, [ord(x) for x in unicodedata.normalize("NFD", ch)])
    assert info.max() < 2**31 and info.min() >= -(2**31)
    info_index, info_blocks = _two_level(info.astype(np.int32))
    decomp_index, decomp_blocks = _two_level(decomp.astype(np.int32))
    map_index, map_blocks = _two_level(_lower_case_map(info, decomp, values))
    return {"info_index": info_index, "info_blocks": info_blocks,
            "decomp_index": decomp_index, "decomp_blocks": decomp_blocks,
            "decomp_values": np.asarray(values, np.int32),
            "map_index": map_index, "map_blocks": map_blocks}


def _lower_case_map(info: np.ndarray, decomp: np.ndarray, values: list[int]) -> np.ndarray:
    """Tier one's map for lower_case=True: each code point's clean + NFD + strip + lower-case
    result when that is one character (see COMPLEX), from the same tables as tier two."""
    classes = SPACE | PUNCT | UNSAFE
    codes = np.arange(0x110000, dtype=np.int64)
    lower = codes + (info >> LOWER_SHIFT)  # characters NFD leaves alone
    out = ((lower - codes) << MAP_SHIFT) | (info[lower] & classes)
    out[(info & DROP) != 0] |= DROP
    out |= info & CJK  # of the code point itself
    ccc = (info >> CCC_SHIFT) & 255
    for c in np.nonzero((decomp != 0) | ((info & MARK) != 0) | (ccc != 0))[0]:
        seq = [c] if decomp[c] == 0 else values[decomp[c] >> 3:(decomp[c] >> 3) + (decomp[c] & 7)]
        kept = [d + (info[d] >> LOWER_SHIFT) for d in seq if not info[d] & MARK]
        movable = any(ccc[d] and not info[d] & MARK for d in seq)
        flags = out[c] & DROP
        if not kept:
            out[c] = flags | DROP
        elif len(kept) > 1 or movable:
            out[c] = flags | COMPLEX
        else:
            out[c] = flags | ((kept[0] - c) << MAP_SHIFT) | (info[kept[0]] & classes)
        out[c] |= info[c] & CJK
    assert out.max() < 2**31 and out.min() >= -(2**31)
    return out.astype(np.int32)


def _overrides() -> list[tuple[int, int, int]]:
    """(first, last, target of first): lower_case=True results newer than this Python's data."""
    out = []
    for item in sections()["lower_case_overrides"].split():
        span, _, target = item.partition(">")
        lo, hi = parse_ranges(span)[0]
        out.append((lo, hi, int(target, 16)))
    return out


# Whitespace: tab, newline, carriage return and Unicode White_Space (11, 12, 0x85 are control
# characters and dropped before they count).
WHITESPACE = (9, 10, 11, 12, 13, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
               0x2029, 0x202F, 0x205F, 0x3000)
# CJK ideographs as `tokenizers` has them (Extension E from U+2B920, not U+2B820).
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
