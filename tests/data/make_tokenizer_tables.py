"""Regenerates the character tables at the end of tfbert/text/tokenizer.py from the reference.

Runs the `tokenizers` package's BertNormalizer, BertPreTokenizer and NFD normalizer on every
code point (and TF Text's WordPiece splitting for _WORDPIECE_SPLITS_DIFFER) and prints the six
table strings. Paste them over the old ones when `tokenizers` or TF Text changes, then run
tests/test_tokenizer.py (slow tests included).

    python tests/data/make_tokenizer_tables.py > /tmp/tables.txt
"""

from __future__ import annotations

import os
import textwrap
import unicodedata

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tokenizers import normalizers, pre_tokenizers  # noqa: E402

POINTS = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]


def ranges(points) -> str:
    runs: list[list[int]] = []
    for c in sorted(points):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return " ".join(f"{a:x}-{b:x}" if a != b else f"{a:x}" for a, b in runs)


def block(name: str, text: str) -> str:
    return f'{name} = """\n' + "\n".join(textwrap.wrap(text, 94)) + '\n"""\n'


def main() -> None:
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                       strip_accents=False, lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                       strip_accents=True, lowercase=False)
    lower = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                       strip_accents=True, lowercase=True)
    nfd = normalizers.NFD()
    split = pre_tokenizers.BertPreTokenizer()

    dropped = {c for c in POINTS if clean.normalize_str(chr(c)) == ""}
    punctuation = {c for c in POINTS if len(split.pre_tokenize_str(f"a{chr(c)}a")) == 3}
    plain = [c for c in POINTS if unicodedata.normalize("NFD", chr(c)) == chr(c)]
    marks = {c for c in plain if c not in dropped and strip.normalize_str(chr(c)) == ""}

    # Combining classes the reference knows: the class reorders a probe pair (class values are
    # stable across Unicode versions, so the value is Python's).
    classes = {}
    for c in plain:
        ch = chr(c)
        if (nfd.normalize_str("x\u0301" + ch) == "x" + ch + "\u0301"
                or nfd.normalize_str("x" + ch + "\u0316") == "x\u0316" + ch):
            classes[c] = unicodedata.combining(ch)
    runs: list[list[int]] = []
    for c, value in sorted(classes.items()):
        if runs and runs[-1][1] == c - 1 and runs[-1][2] == value:
            runs[-1][1] = c
        else:
            runs.append([c, c, value])
    combining = " ".join((f"{a:x}-{b:x}" if a != b else f"{a:x}") + f":{v}" for a, b, v in runs)

    # lower_case=True results Python's unicodedata gets differently.
    def python_result(c: int) -> str:
        if c in dropped:
            return ""
        out = "".join(x for x in unicodedata.normalize("NFD", chr(c)) if ord(x) not in marks)
        return "".join(x.lower() for x in out)

    overrides = []
    for c in POINTS:
        want = lower.normalize_str(chr(c))
        if want != python_result(c) and want != " ":  # whitespace: the class table's job
            assert len(want) == 1, (hex(c), want)
            overrides.append((c, ord(want)))
    runs = []
    for c, target in overrides:
        if runs and runs[-1][1] == c - 1 and runs[-1][2] + c - runs[-1][0] == target:
            runs[-1][1] = c
        else:
            runs.append([c, c, target])
    override_text = " ".join((f"{a:x}-{b:x}" if a != b else f"{a:x}") + f">{t:x}"
                             for a, b, t in runs)

    # Where TF Text's WordPiece splits "a?a" differently from the reference.
    import tensorflow as tf
    import tensorflow_text as tf_text

    pad = normalizers.BertNormalizer(strip_accents=False, lowercase=False)
    wordpiece = tf_text.FastWordpieceTokenizer(["[UNK]", "a", "##a"], token_out_type=tf.int32,
                                               max_bytes_per_word=1000)
    points = [c for c in POINTS if c != ord("a")]
    texts = [f"a{chr(c)}a" for c in points]
    pieces = wordpiece.tokenize(tf.constant([t.encode() for t in texts])).row_lengths().numpy()
    differ = set()
    for c, text, n in zip(points, texts, pieces, strict=True):
        normalized = pad.normalize_str(text)
        if normalized != "aa" and len(split.pre_tokenize_str(normalized)) != n:
            differ.add(c)

    print(block("_DROPPED", ranges(dropped)))
    print(block("_PUNCTUATION", ranges(punctuation)))
    print(block("_NONSPACING_MARKS", ranges(marks)))
    print(block("_LOWER_CASE_OVERRIDES", override_text))
    print(block("_WORDPIECE_SPLITS_DIFFER", ranges(differ)))
    print(block("_COMBINING_CLASSES", combining))


if __name__ == "__main__":
    main()
