"""tfbert.BertTokenizer against the reference (`tokenizers`' BertWordPieceTokenizer, the engine of
transformers.BertTokenizerFast): ids and offsets on real text and edge cases for an uncased
English vocab, a Chinese vocab from the vocab builder and a cased vocab; every code point of the
BMP (all of Unicode in the slow run); the in-graph uses (tf.function, tf.data, SavedModel)."""

from __future__ import annotations

import glob
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfbert.data import corpora
from tfbert.text import char_tables
from tfbert.text import vocab as vocab_lib
from tfbert.text.tokenizer import BertTokenizer

tokenizers = pytest.importorskip("tokenizers")

# --- text to test on ---------------------------------------------------------------------------

EDGE_CASES = [
    "", " ", "   \t\n  ", "\u3000\u3000", "\u00a0", "\n\r\t",
    "Hello, World!", "naïve café Ærøskøbing Ångström façade résumé", "ÀÉÎÕÜ àéîõü ß ẞ ǅ",
    "İstanbul ıi", "ΟΔΥΣΣΕΥΣ σοφός ς", "Straße STRASSE", "ﬁnance ﬀ",  # no NFKC: ligatures stay
    "中文，测试。！？（）：；“”‘’、《》【】…—", "ＡＢＣ　ａｂｃ　１２３，．！",  # full-width stays
    "日本語のテキスト、カタカナ。", "한국어 텍스트 입니다", "ภาษาไทย", "العربية مرحبا", "עברית",
    "Ελληνικά Кириллица", "emoji 😀🥰👍🏽❤️👨‍👩‍👧 🇨🇳 ok", "🫨🩷 newer emoji",
    "a\x00b\x01c\x7fd\x85e", "zero\u200bwidth\u200cjoin\u200dx\ufeffy", "soft\u00adhyphen",
    "bidi\u202aab\u202c\u2066c\u2069", "line\u2028para\u2029end", "tab\tsep\x0bvt\x0cff",
    "replacement \ufffd char", "private \ue000\uf8ff\U000f0000 use", "tag\U000e0041s",
    "https://example.com/path?q=1&x=%20#frag", "user@example.com", "$1,234.56 -7.5e-3 100%",
    "3.14159 2024-01-01 12:30:45 +86-10-1234", "C++ C# F# .NET node.js", "don't can't O'Neil",
    "x" * 99, "y" * 100, "z" * 101, "w" * 150 + " tail", "é" * 101, "ab" * 60 + "!",
    "中" * 150, "mixed中文English混合123数字", "UPPER lower MiXeD", "e\u0301 a\u0300\u0316",
    "x\U0001d16d\U0001d165 y\u031a\U0001d166", "\u0344\u1f82\u212b\u2126\uf900\U0002f800",
    "ᾂΐǗ", "\u0f73\u0f75\u0f81", "Ǆ ǆ ǅ", "Σ", "ΑΣ.", "\u2e43\u166d\u111c9\U0002b820\U0002b920",
    "\U00011938 \U00010d50 \u1c89", "[CLS] [SEP] [MASK] [UNK] [PAD] ##s ##", "#hashtag ##ing",
    "...!!!???", "((()))", "『引号』「括号」", "☆★○●◎◇◆□■△▲※→←↑↓", "①②③ Ⅰ Ⅱ ⅲ",
    "１２３４５６７８９０", "㈱㌔㍿", "\U00020000\U0002a6d6\U0002b740", "\U0001f600" * 30,
    "ａ" * 100, "ａ" * 101, "１" * 101 + "，", "x" * 60 + "ｘ" * 41, "x" * 100 + "，" + "y" * 100,
    "中" + "q" * 101 + "中", "q" * 100 + " " + "r" * 101,
]


def english_lines(limit: int = 1500) -> list[str]:
    """Real English prose: scikit-learn's dataset descriptions and package descriptions."""
    site = os.path.dirname(os.path.dirname(np.__file__))
    files = sorted(glob.glob(os.path.join(site, "sklearn", "datasets", "descr", "*.rst")))
    files += sorted(glob.glob(os.path.join(site, "*.dist-info", "METADATA")))
    lines: list[str] = []
    for name in files:
        with open(name, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if len(line.split()) >= 5 and len(re.findall("[A-Za-z]", line)) > len(line) / 2:
                    lines.append(line)
    return list(dict.fromkeys(lines))[:limit]


def chinese_lines(limit: int = 1000) -> list[str]:
    reviews = [text for text, _ in corpora.reviews()][:limit // 2]
    return reviews + corpora.people_daily_lines()[:limit - len(reviews)]


# --- vocabs ------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def english_vocab(minilm_dir) -> str:
    return os.path.join(minilm_dir, "vocab.txt")


@pytest.fixture(scope="session")
def chinese_vocab(tmp_path_factory) -> str:
    """A Chinese vocab made by the vocab builder (8,000 tokens from 20,000 lines)."""
    from tfbert.text import vocab_builder

    lines = [t for t in corpora.iter_chinese_text() if corpora.stable_split(t) != "test"]
    tokens = vocab_builder.build_vocab(lines[:20000], vocab_size=8000, show_progress=False)
    path = str(tmp_path_factory.mktemp("zh") / "vocab.txt")
    vocab_builder.write_vocab(tokens, path)
    return path


@pytest.fixture(scope="session")
def cased_vocab(tmp_path_factory) -> str:
    """A cased vocab (no cased BERT vocab ships offline): built with lower_case=False from
    English and Chinese text."""
    from tfbert.text import vocab_builder

    lines = english_lines(3000) + chinese_lines(4000)
    tokens = vocab_builder.build_vocab(lines, vocab_size=6000, lower_case=False,
                                       cjk_fill=False, show_progress=False)
    path = str(tmp_path_factory.mktemp("cased") / "vocab.txt")
    vocab_builder.write_vocab(tokens, path)
    return path


def reference(vocab_file: str, lower_case: bool, max_chars: int = 100):
    """`BertWordPieceTokenizer`'s pipeline (BertNormalizer, BertPreTokenizer, WordPiece with
    `max_chars`-character words, 100 by default), without its added-token matching: like
    Google's tokenizer, tfbert treats "[CLS]" in input text as text (transformers:
    `split_special_tokens=True`)."""
    ref = tokenizers.Tokenizer(tokenizers.models.WordPiece.from_file(
        vocab_file, unk_token="[UNK]", max_input_chars_per_word=max_chars))
    ref.normalizer = tokenizers.normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lower_case,
        lowercase=lower_case)
    ref.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    return ref


def compare(tokenizer: BertTokenizer, ref, texts: list[str], batch_size: int = 512) -> dict:
    """Ids (of `tokenize`, and of `tokenize_with_offsets`, which takes no tier zero) and offsets
    of tfbert vs the reference; returns counts and the first mismatches."""
    expected = ref.encode_batch(texts, add_special_tokens=False)
    same_ids = same_offsets = 0
    bad = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start:start + batch_size]
        plain = tokenizer.tokenize(tf.constant(chunk)).to_list()
        ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(chunk))
        for i, (a, s, e) in enumerate(zip(ids.to_list(), starts.to_list(), ends.to_list(),
                                          strict=True)):
            ref_enc = expected[start + i]
            if a == ref_enc.ids == plain[i]:
                same_ids += 1
                if list(zip(s, e, strict=True)) == [tuple(o) for o in ref_enc.offsets]:
                    same_offsets += 1
                    continue
            bad.append((chunk[i][:60], a[:12], ref_enc.ids[:12]))
    return {"lines": len(texts), "same_ids": same_ids, "same_offsets": same_offsets,
            "bad": bad[:5]}


# --- parity ------------------------------------------------------------------------------------

def test_uncased_english_vocab_parity(english_vocab):
    texts = english_lines() + chinese_lines(600) + EDGE_CASES
    result = compare(BertTokenizer(english_vocab), reference(english_vocab, True), texts)
    assert result["lines"] >= 2000
    assert result["same_ids"] == result["same_offsets"] == result["lines"], result


def test_chinese_vocab_parity(chinese_vocab):
    texts = chinese_lines(2000) + english_lines(300) + EDGE_CASES
    result = compare(BertTokenizer(chinese_vocab), reference(chinese_vocab, True), texts)
    assert result["lines"] >= 2000
    assert result["same_ids"] == result["same_offsets"] == result["lines"], result


def test_cased_vocab_parity(cased_vocab):
    texts = english_lines(1200) + chinese_lines(800) + EDGE_CASES
    tokenizer = BertTokenizer(cased_vocab, lower_case=False)
    result = compare(tokenizer, reference(cased_vocab, False), texts)
    assert result["same_ids"] == result["same_offsets"] == result["lines"], result
    # Case and accents are kept.
    ids = tokenizer.tokenize(tf.constant(["The", "the"])).to_list()
    assert ids[0] != ids[1]


@pytest.mark.parametrize("lower_case", [True, False])
def test_tier_zero_takes_plain_text_only(chinese_vocab, lower_case):
    """`tokenize` sends most Chinese lines to WordPiece untouched (tier zero), and never a text
    that normalization changes or whose words run over 100 characters."""
    tokenizer = BertTokenizer(chinese_vocab, lower_case=lower_case)
    raw = lambda texts: tf.strings.regex_full_match(tf.constant(texts),
                                                    tokenizer._raw_pattern).numpy().tolist()
    assert sum(raw(chinese_lines(2000))) / 2000 > 0.9
    plain = ["", "中文，测试。", "y" * 100, "ａ" * 100, "q" * 100 + " " + "r" * 100]
    assert raw(plain) == [True] * 5
    assert raw(["z" * 101, "ａ" * 101, "x" * 60 + "ｘ" * 41, "tab\tx", "a\u00a0b", "\u00e9",
                "soft\u00adhyphen"]) == [False] * 7
    assert raw(["UPPER", "Ａ"]) == [not lower_case] * 2


@pytest.mark.parametrize("lower_case", [True, False])
def test_word_by_word_path_parity(english_vocab, lower_case):
    """The fallback path (batches holding characters TF Text splits differently) is exact too."""
    tokenizer = BertTokenizer(english_vocab, lower_case=lower_case)
    tokenizer._force_word_path = True
    texts = english_lines(300) + chinese_lines(200) + EDGE_CASES
    result = compare(tokenizer, reference(english_vocab, lower_case), texts)
    assert result["same_ids"] == result["same_offsets"] == result["lines"], result


def random_texts(count: int, seed: int) -> list[str]:
    """Random strings over characters that exercise every rule (marks of all combining
    classes, characters the reference's tables see differently from today's Unicode, ...)."""
    rng = random.Random(seed)
    marks = [chr(c) for c in [*range(0x300, 0x370), 0x591, 0x5B0, 0x5C4, 0xE48, 0x1D165,
                              0x1D16D, 0x1D166, 0x1D172, 0x8D3, 0x8CA, 0x1AC1, 0x1734, 0xF71,
                              0xF72, 0xF80, 0x302A, 0x3099]]
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") * 3
            + list(" \t\n\r\u3000\u00a0\u2028\x0b\x85.,;:!?'\"()[]{}#$%^&*-_=+/\\|~`<>@")
            + list("，。！？（）：；“”、《》…—ＡＢＣａｂｃ１２３中文测试人民日报好的很不错")
            + list("éèêëÉÈÊËàáâäçñøßİıΣσςΟΔÅÆŒ한국어텍스트😀🥰👍🏽") + marks
            + list("\x00\ufffd\u200b\u200d\ufeff\ue000\U0010fffd\u0344\u1f82\ufb01\u212b")
            + list("\u2126\uf900\U0002f800\u2e43\u166d\U000111c9\U0002b820\U0002b920\u1c89")
            + list("\U00011938\U00010d50"))
    texts = []
    for _ in range(count):
        text = "".join(rng.choice(pool) for _ in range(rng.choice([0, 1, 3, 10, 40, 120])))
        if rng.random() < 0.1:
            text += " " + "x" * rng.choice([99, 100, 101, 150]) + "é" * rng.choice([0, 1])
        texts.append(text)
    return texts


@pytest.mark.parametrize("lower_case", [True, False])
def test_random_text_parity(english_vocab, lower_case):
    texts = random_texts(300, seed=int(lower_case))
    for force_words in (False, True):
        tokenizer = BertTokenizer(english_vocab, lower_case=lower_case)
        tokenizer._force_word_path = force_words
        result = compare(tokenizer, reference(english_vocab, lower_case), texts, batch_size=50)
        assert result["same_ids"] == result["same_offsets"] == result["lines"], result


def code_points(everything: bool) -> list[int]:
    top = 0x110000 if everything else 0x10000
    return [c for c in range(top) if not 0xD800 <= c < 0xE000]


def check_code_points(english_vocab: str, lower_case: bool, points: list[int]) -> None:
    """For every code point c, the words of "a{c}B" equal the reference's normalizer +
    pre-tokenizer output, and the ids of "a{c}B" and "a{c}b" equal its ids (safe characters in
    one batch, through tier zero or the whole-text path; the rest word by word)."""
    norm = tokenizers.normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lower_case,
        lowercase=lower_case)
    split = tokenizers.pre_tokenizers.BertPreTokenizer()
    texts = ["a" + chr(c) + "B" for c in points]
    tokenizer = BertTokenizer(english_vocab, lower_case=lower_case)
    words = tokenizer.split_words(tf.constant([t.encode("utf-8") for t in texts])).to_list()
    bad = []
    for c, text, got in zip(points, texts, words, strict=True):
        want = [w for w, _ in split.pre_tokenize_str(norm.normalize_str(text))]
        if [w.decode("utf-8") for w in got] != want:
            bad.append((hex(c), got, want))
    assert not bad, bad[:10]

    unsafe = {lo for lo, hi in char_tables.code_point_ranges("wordpiece_splits_differ")
              for lo in range(lo, hi + 1)}
    ref = reference(english_vocab, lower_case)
    lower = ["a" + chr(c) + "b" for c in points]  # also through tier zero when lower_case=True
    for group in ([t for c, t in zip(points, texts, strict=True) if c not in unsafe],
                  [t for c, t in zip(points, texts, strict=True) if c in unsafe],
                  [t for c, t in zip(points, lower, strict=True) if c not in unsafe]):
        if not group:
            continue
        expected = [e.ids for e in ref.encode_batch(group, add_special_tokens=False)]
        got = tokenizer.tokenize(tf.constant(group)).to_list()
        bad = [(t, g, e) for t, g, e in zip(group, got, expected, strict=True) if g != e]
        assert not bad, bad[:10]


@pytest.mark.parametrize("lower_case", [True, False])
def test_every_bmp_code_point(english_vocab, lower_case):
    check_code_points(english_vocab, lower_case, code_points(everything=False))


@pytest.mark.slow
@pytest.mark.parametrize("lower_case", [True, False])
def test_every_code_point(english_vocab, lower_case):
    check_code_points(english_vocab, lower_case, code_points(everything=True))


@pytest.mark.slow
def test_whole_chinese_corpus_parity(chinese_vocab):
    texts = list(corpora.iter_chinese_text())
    result = compare(BertTokenizer(chinese_vocab), reference(chinese_vocab, True), texts,
                     batch_size=2048)
    assert result["same_ids"] == result["same_offsets"] == result["lines"], result


@pytest.mark.slow
def test_wordpiece_splits_differ_table_is_complete():
    """The installed TF Text splits text (whitespace, punctuation, CJK) exactly where the
    reference does, except on the characters of the wordpiece_splits_differ section of
    tfbert/text/data/unicode_classes.txt."""
    import tensorflow_text as tf_text

    listed = {c for lo, hi in char_tables.code_point_ranges("wordpiece_splits_differ")
              for c in range(lo, hi + 1)}
    norm = tokenizers.normalizers.BertNormalizer(strip_accents=False, lowercase=False)
    split = tokenizers.pre_tokenizers.BertPreTokenizer()
    wordpiece = tf_text.FastWordpieceTokenizer(["[UNK]", "a", "##a"], token_out_type=tf.int32,
                                               max_bytes_per_word=1000)
    points = [c for c in code_points(everything=True) if c != ord("a")]
    texts = ["a" + chr(c) + "a" for c in points]
    pieces = wordpiece.tokenize(tf.constant([t.encode() for t in texts])).row_lengths().numpy()
    differ = set()
    for c, text, n in zip(points, texts, pieces, strict=True):
        normalized = norm.normalize_str(text)
        if normalized != "aa" and len(split.pre_tokenize_str(normalized)) != n:  # not dropped
            differ.add(c)
    assert differ <= listed, [hex(c) for c in sorted(differ - listed)][:20]
    assert len(listed - differ) < 10  # the table holds no stale entries (ICU updates)


def test_slow_python_reference_agrees_on_edge_cases(english_vocab):
    """Google's algorithm in pure Python (transformers' legacy BertTokenizer) gives the same ids
    on the edge cases, except where the two references themselves differ (documented in
    tfbert/text/tokenizer.py): final sigma, characters newer than the Rust tables; and
    transformers keeps "[CLS]"-like strings whole (never_split), which Google's code does not."""
    legacy = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy")
    slow = legacy.BertTokenizerLegacy(english_vocab, do_lower_case=True,
                                      split_special_tokens=True)
    tokenizer = BertTokenizer(english_vocab)
    known_differences = {"ΟΔΥΣΣΕΥΣ σοφός ς", "ΑΣ.", "\u2e43\u166d\u111c9\U0002b820\U0002b920",
                         "\U00011938 \U00010d50 \u1c89", "🫨🩷 newer emoji",
                         "[CLS] [SEP] [MASK] [UNK] [PAD] ##s ##"}
    ids = tokenizer.tokenize(tf.constant(EDGE_CASES)).to_list()
    agree = [t for t, got in zip(EDGE_CASES, ids, strict=True)
             if got == slow.convert_tokens_to_ids(slow.tokenize(t))]
    assert set(EDGE_CASES) - set(agree) <= known_differences, set(EDGE_CASES) - set(agree)
    assert len(agree) >= len(EDGE_CASES) - len(known_differences)


def test_max_chars_per_word_follows_either_reference(english_vocab):
    """100 (the default) is `tokenizers`' limit, 200 Google's tokenization.py's: with each, the
    ids and offsets equal the reference run with that limit, on both tiers and words of 99-260
    characters."""
    long_words = ["x" * 150, "é" * 150 + " tail", "ab" * 100, "q" * 200 + " " + "r" * 201,
                  "中" + "ａ" * 180 + "中", "hello " + "z" * 260]
    texts = EDGE_CASES + long_words
    for limit in (100, 200):
        tokenizer = BertTokenizer(english_vocab, max_chars_per_word=limit)
        result = compare(tokenizer, reference(english_vocab, True, limit), texts)
        assert result["same_ids"] == result["same_offsets"] == len(texts), (limit, result)
        tokenizer._force_word_path = True
        result = compare(tokenizer, reference(english_vocab, True, limit), texts)
        assert result["same_ids"] == len(texts), (limit, result)
    short = BertTokenizer(english_vocab)
    assert short.max_chars_per_word == 100
    assert short.tokenize(tf.constant(["x" * 150])).to_list() == [[short.unk_id]]
    google = BertTokenizer.from_config(BertTokenizer(english_vocab,
                                                     max_chars_per_word=200).get_config())
    assert google.max_chars_per_word == 200
    assert len(google.tokenize(tf.constant(["x" * 150])).to_list()[0]) > 1
    with pytest.raises(ValueError, match="max_chars_per_word"):
        BertTokenizer(english_vocab, max_chars_per_word=0)


# --- offsets, detokenize -----------------------------------------------------------------------

def test_offsets_slice_the_source_characters(english_vocab):
    """text[start:end], normalized as the reference does, is the token (without "##")."""
    tokenizer = BertTokenizer(english_vocab)
    norm = tokenizers.normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    texts = english_lines(200) + chinese_lines(200) + ["Héllo WÖRLD, naïve ﬁne 中文！"]
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(texts))
    vocab = tokenizer.vocab
    checked = 0
    for text, row, s_row, e_row in zip(texts, ids.to_list(), starts.to_list(), ends.to_list(),
                                       strict=True):
        for token_id, s, e in zip(row, s_row, e_row, strict=True):
            assert 0 <= s < e <= len(text)
            if token_id != tokenizer.unk_id:
                assert norm.normalize_str(text[s:e]).strip() == vocab[token_id].removeprefix("##")
                checked += 1
    assert checked > 5000


def test_detokenize_matches_reference_join(english_vocab):
    tokenizer = BertTokenizer(english_vocab)
    texts = ["Hello, world! Tokenization isn't hard.", "中文测试", "", "unaffable"]
    ids = tokenizer.tokenize(tf.constant(texts))
    vocab = tokenizer.vocab
    expected = [" ".join(vocab[i] for i in row).replace(" ##", "").strip()
                for row in ids.to_list()]
    assert [t.decode() for t in tokenizer.detokenize(ids).numpy()] == expected
    assert tokenizer.detokenize(ids).numpy()[0] == b"hello , world ! tokenization isn ' t hard ."
    dense = tokenizer.detokenize(tf.constant([[7592, 2088]]))
    assert dense.numpy().tolist() == [b"hello world"]


# --- bad input ---------------------------------------------------------------------------------

def test_bad_input_never_crashes(english_vocab):
    tokenizer = BertTokenizer(english_vocab)
    ref = reference(english_vocab, True)
    empty = tokenizer.tokenize(tf.constant([], tf.string))
    assert empty.shape[0] == 0 and empty.flat_values.shape[0] == 0
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(["", " ", "\x00"]))
    assert ids.to_list() == starts.to_list() == ends.to_list() == [[], [], []]

    # Invalid UTF-8 decodes with replacement (U+FFFD per bad sequence, as Python's
    # errors="replace"), and cleaning drops the U+FFFD.
    raw = [b"ok \xff\xfe bad", b"\xe4\xb8 cut", b"\xed\xa0\x80 surrogate", b"\xc0\xaf over",
           b"\xf4\x90\x80\x80 big", "中文".encode() + b"\x80" + "测试".encode()]
    ids, starts, _ = tokenizer.tokenize_with_offsets(tf.constant(raw))
    decoded = [r.decode("utf-8", errors="replace") for r in raw]
    assert ids.to_list() == [e.ids for e in ref.encode_batch(decoded, add_special_tokens=False)]
    assert starts.to_list()[0] == [0, 6]  # "ok" at 0, "bad" after two replaced bytes

    big = ("Lorem ipsum dolor sit amet 中文测试。 " * 30000)[:1_000_000]
    ids = tokenizer.tokenize(tf.constant([big, "x"]))
    assert ids.to_list()[0] == ref.encode(big, add_special_tokens=False).ids
    assert ids.to_list()[1] == [1060]


def test_input_forms(english_vocab):
    tokenizer = BertTokenizer(english_vocab)
    row = tokenizer.tokenize("hello world")  # a Python str: one row
    assert row.numpy().tolist() == [7592, 2088]
    nested = tokenizer.tokenize(tf.ragged.constant([["hello", "world"], ["hi"]]))
    assert nested.to_list() == [[[7592], [2088]], [[7632]]]
    matrix = tokenizer.tokenize(tf.constant([["hello", "hi"]]))
    assert matrix.to_list() == [[[7592], [7632]]]
    assert tokenizer(tf.constant(["hello"])).to_list() == [[7592]]


# --- vocab -------------------------------------------------------------------------------------

def test_special_ids_and_vocab_errors(english_vocab, tmp_path):
    tokenizer = BertTokenizer(english_vocab)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id, tokenizer.vocab_size) == (0, 100, 101, 102, 103, 30522)
    assert tokenizer.vocab[7592] == "hello"

    missing = tmp_path / "no_mask.txt"
    missing.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"no \[MASK\]"):
        BertTokenizer(str(missing))
    repeated = tmp_path / "repeated.txt"
    repeated.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\na\n", encoding="utf-8")
    with pytest.raises(ValueError, match="lines 6 and 7"):
        vocab_lib.load_vocab(str(repeated))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        BertTokenizer(str(tmp_path / "nope.txt"))


# --- in-graph uses -----------------------------------------------------------------------------

def test_tf_function_tf_data_and_config(english_vocab):
    tokenizer = BertTokenizer(english_vocab)
    texts = ["Hello, world!", "中文测试", "", "naïve"]
    eager = tokenizer.tokenize(tf.constant(texts)).to_list()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def traced(x):
        ids, starts, ends = tokenizer.tokenize_with_offsets(x)
        return ids, starts, ends

    assert traced(tf.constant(texts))[0].to_list() == eager
    ds = tf.data.Dataset.from_tensor_slices(texts).batch(3).map(tokenizer.tokenize)
    assert [row for batch in ds for row in batch.to_list()] == eager

    config = tokenizer.get_config()
    clone = BertTokenizer.from_config(config)
    assert clone.tokenize(tf.constant(texts)).to_list() == eager
    assert config["vocab_file"] == tokenizer.vocab and config["lower_case"] is True


@pytest.mark.slow  # (test_export's fresh-process test loads exports with the tokenizer inside)
def test_saved_model_loads_without_tfbert(english_vocab, tmp_path):
    tokenizer = BertTokenizer(english_vocab)

    class Module(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, texts):
            ids, starts, ends = tokenizer.tokenize_with_offsets(texts)
            return {"ids": ids.to_tensor(-1), "starts": starts.to_tensor(-1)}

    module = Module()
    path = str(tmp_path / "tokenizer_model")
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    texts = ["Hello, WORLD! naïve", "中文测试。"]
    expected = module.serve(tf.constant(texts))["ids"].numpy().tolist()
    code = (
        "import sys, json, tensorflow as tf, tensorflow_text\n"
        f"m = tf.saved_model.load({path!r})\n"
        f"out = m.signatures['serving_default'](tf.constant({texts!r}))\n"
        "print(json.dumps(out['ids'].numpy().tolist()))\n"
        "assert 'tfbert' not in sys.modules\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=str(tmp_path), timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert eval(run.stdout.strip().splitlines()[-1]) == expected

    # Besides core TensorFlow, only TF Text's FastWordpieceTokenizeWithOffsets (TF Text >= 2.7).
    graph = module.serve.get_concrete_function().graph.as_graph_def()
    ops = {n.op for n in graph.node} | {n.op for f in graph.library.function
                                         for n in f.node_def}
    non_core = {op for op in ops if not hasattr(tf.raw_ops, op)}
    assert non_core <= {"FastWordpieceTokenizeWithOffsets"}, non_core


def test_tables_are_consistent():
    """Lower-casing never changes a character's class (the class is read before it)."""
    tables = char_tables.tables()
    info = tables["info_blocks"][tables["info_index"].repeat(128) * 128
                                 + np.tile(np.arange(128), len(tables["info_index"]))]
    delta = info >> char_tables.LOWER_SHIFT
    changed = np.nonzero(delta)[0]
    classes = char_tables.SPACE | char_tables.PUNCT | char_tables.UNSAFE
    assert np.all((info[changed] & classes) == (info[changed + delta[changed]] & classes))
