"""Users' text files: encodings, byte-order marks, column headers, bad bytes, degenerate corpora.

Every reader goes through `tfbert.textfiles`; these tests pin what a user sees: the same examples
with or without a BOM, GBK text read with `--input_encoding=gb18030` and refused (exit 2, file,
line, byte offset, flag) without it, column names matched one way everywhere, and no pretraining
output for an input that cannot make any.
"""

from __future__ import annotations

import csv
import glob
import importlib.util
import json
import logging
import os

import pytest

from tfbert import errors, textfiles
from tfbert.data import classification, corpora, ner
from tfbert.data import squad as qa_data
from tfbert.pretraining_data import instances, records
from tfbert.pretraining_data.instance_files import create_pretraining_data, read_text_documents
from tfbert.text import vocab as vocab_lib
from tfbert.text import vocab_builder

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data_tools")
BOM = "\ufeff"


def tool(name: str):
    """The data_tools/NAME.py module (its main takes argv)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(TOOLS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_tool(name: str, argv: list[str], capsys) -> tuple[int, str, object]:
    """Runs a tool as its `__main__` does (through errors.run_cli): (exit code, stderr, what
    main returned)."""
    capsys.readouterr()
    code, result = 0, None
    try:
        result = errors.run_cli(tool(name).main, argv, prog=f"{name}.py")
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err, result


def write_bytes(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def outputs(directory) -> list[str]:
    """Every file under `directory` whose name holds "out" (temp files included)."""
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, "*out*"))
                  + glob.glob(os.path.join(directory, ".*out*")))


@pytest.fixture(scope="module")
def gbk_documents() -> list[list[str]]:
    """30 People's Daily articles that GBK can encode (so GBK and UTF-8 files hold one text)."""
    docs = []
    for doc in corpora.people_daily_documents():
        try:
            "".join(doc).encode("gbk")
        except UnicodeEncodeError:
            continue
        docs.append(doc)
        if len(docs) == 30:
            return docs
    raise AssertionError("not enough GBK-encodable documents")


def corpus_text(documents: list[list[str]]) -> str:
    return "\n\n".join("\n".join(doc) for doc in documents) + "\n"


def raw_records(pattern: str) -> list[bytes]:
    return [r.numpy() for r in records.read_records(records.expand_file_pattern(pattern))]


# --------------------------------------------------------------------------- pretraining corpus


def test_gbk_corpus_is_refused_then_read_with_the_flag(gbk_documents, chinese_vocab_file,
                                                       tmp_path, capsys):
    text = corpus_text(gbk_documents)
    utf8 = write_bytes(tmp_path / "utf8.txt", text.encode("utf-8"))
    bom = write_bytes(tmp_path / "bom.txt", (BOM + text).encode("utf-8"))
    gbk = write_bytes(tmp_path / "gbk.txt", text.encode("gbk"))
    common = [f"--vocab_file={chinese_vocab_file}", "--max_seq_length=64", "--dupe_factor=2",
              "--random_seed=3", "--num_shards=2", "--no_progress"]

    code, err, _ = run_tool("create_pretraining_data",
                         [f"--input_file={gbk}", f"--output_file={tmp_path}/gbk_out", *common],
                         capsys)
    assert code == 2
    assert err.startswith(f"create_pretraining_data.py: error: {gbk}:1: bytes ")
    assert "at byte offset 0 are not valid utf-8" in err
    assert "pass --input_encoding=gb18030" in err
    assert len(err.strip().splitlines()) == 1
    assert outputs(tmp_path) == []  # nothing written, not even a temp file

    stats = {}
    for name, path, extra in (("utf8", utf8, []), ("bom", bom, []),
                              ("gbk", gbk, ["--input_encoding=gb18030"])):
        code, err, stats[name] = run_tool("create_pretraining_data", [
            f"--input_file={path}", f"--output_file={tmp_path}/{name}_out", *common, *extra],
            capsys)
        assert code == 0, err
    reference = raw_records(f"{tmp_path}/utf8_out-*")
    assert len(reference) == stats["utf8"].instances > 100
    assert raw_records(f"{tmp_path}/bom_out-*") == reference
    assert raw_records(f"{tmp_path}/gbk_out-*") == reference
    assert stats["gbk"] == stats["utf8"] == stats["bom"]
    # The summary's counts are those of the corpus and of the records.
    labels = next_sentence_labels(f"{tmp_path}/utf8_out-*")
    s = stats["utf8"]
    assert (s.documents, s.sentences) == (30, sum(len(d) for d in gbk_documents))
    assert s.not_next == sum(labels) and s.passes == 2 and s.bad_lines == 0
    assert (f"30 documents, {s.sentences:,} sentences -> {len(labels):,} instances over 2 "
            f"pass(es)") in s.summary()
    assert f"NotNext share {sum(labels) / len(labels):.2%} ({sum(labels):,} of " in s.summary()
    shards = [f"{n}_out-{i:05d}-of-00002" for n in ("bom", "gbk", "utf8") for i in range(2)]
    assert sorted(outputs(tmp_path)) == sorted(  # each with tfbert's record of it
        shards + [f".{shard}.tfbert.json" for shard in shards])


def next_sentence_labels(pattern: str) -> list[int]:
    ds = records.read_records(records.expand_file_pattern(pattern)).batch(256)
    return [int(x) for batch in ds.map(records.parse_examples)
            for x in batch["next_sentence_labels"].numpy()]


def test_summary_of_a_small_known_corpus(chinese_vocab_file, tmp_path):
    """Four one-sentence documents, two passes: every chunk is one sentence, so every instance
    is NotNext with B from another document; one sentence is longer than a pair holds."""
    long = "中国人民" * 8  # 32 tokens > 16 - 3
    docs = [["今天天气很好。"], ["我们去公园。"], [long], ["他们在北京工作。"]]
    stats, paths = create_pretraining_data(
        str(tmp_path / "small.tfrecord"), chinese_vocab_file, documents=docs,
        options=instances.InstanceOptions(max_seq_length=16, short_seq_prob=0.0,
                                          dupe_factor=2),
        progress=False)
    assert (stats.documents, stats.sentences, stats.instances, stats.not_next) == (4, 4, 8, 8)
    assert stats.long_sentences == 1 and stats.pair_tokens == 13 and stats.dropped == 0
    assert stats.summary().startswith(
        "4 documents, 4 sentences -> 8 instances over 2 pass(es), ")
    assert "NotNext share 100.00% (8 of 8); 1 sentences longer than 13 tokens (cut to fit), " \
        "0 chunks without a pair" in stats.summary()
    assert stats.summary().endswith("0 lines skipped for undecodable bytes")
    assert len(raw_records(paths[0])) == 8


@pytest.mark.parametrize("content, message", [
    ("", "no documents (no line holds text"),
    ("\n  \n\n", "no documents (no line holds text"),
    ("第一句。\n第二句。\n第三句。\n", "only one document (3 sentence(s)); next-sentence "
                                   "prediction needs at least two"),
])
def test_empty_and_one_document_corpora_write_nothing(content, message, chinese_vocab_file,
                                                      tmp_path, capsys):
    corpus = write_bytes(tmp_path / "corpus.txt", content.encode("utf-8"))
    code, err, _ = run_tool("create_pretraining_data", [
        f"--input_file={corpus}", f"--output_file={tmp_path}/out.tfrecord",
        f"--vocab_file={chinese_vocab_file}", "--no_progress"], capsys)
    assert code == 2
    assert err.startswith(f"create_pretraining_data.py: error: {corpus}: {message}")
    assert len(err.strip().splitlines()) == 1
    assert outputs(tmp_path) == []


@pytest.mark.parametrize("documents, message", [
    ([], "documents: no documents"),
    ([[" ", ""]], "documents: no documents"),
    ([["第一句。", "第二句。"], []], r"documents: only one document \(2 sentence\(s\)\)"),
])
def test_in_memory_documents_need_two(documents, message, chinese_vocab_file, tmp_path):
    with pytest.raises(errors.UserError, match=f"^{message}"):
        create_pretraining_data(str(tmp_path / "out"), chinese_vocab_file,
                                documents=documents, progress=False)
    assert outputs(tmp_path) == []


@pytest.mark.parametrize("argv, message", [
    (["--input_encoding=latin-99"], "unknown text encoding 'latin-99' (--input_encoding takes "
                                    "a Python codec name such as utf-8, gb18030, gbk, big5)"),
    (["--input_file={tmp}/missing*.txt"], "no file matches '{tmp}/missing*.txt'"),
])
def test_cli_user_errors_are_one_line(argv, message, chinese_vocab_file, tmp_path, capsys):
    argv = [a.format(tmp=tmp_path) for a in argv]
    code, err, _ = run_tool("create_pretraining_data", [
        *argv, f"--output_file={tmp_path}/out", f"--vocab_file={chinese_vocab_file}"], capsys)
    assert (code, err) == (2, "create_pretraining_data.py: error: "
                              f"{message.format(tmp=tmp_path)}\n")


def test_a_few_bad_lines_are_skipped_and_counted_more_are_an_error(tmp_path):
    lines = [f"第{i}句。" if i % 5 else "" for i in range(1, 20_001)]  # 4,000 documents
    good = "\n".join(lines).encode("utf-8")
    bad_line = "坏".encode("gbk")
    offset = len("\n".join(lines[:6]).encode("utf-8")) + 1  # where line 7 starts
    one_bad = good.replace("第7句。".encode(), bad_line, 1)
    path = write_bytes(tmp_path / "one_bad.txt", one_bad)
    skipped = []
    docs = list(read_text_documents([path], on_skip=lambda *x: skipped.append(x)))
    assert len(docs) == 4000 and sum(len(d) for d in docs) == 16_000 - 1
    assert "第7句。" not in docs[1] and docs[1] == ["第6句。", "第8句。", "第9句。"]
    assert skipped == [(path, 7, f"{path}:7: bytes {bad_line!r} at byte offset "
                                 f"{offset} are not valid utf-8 (they decode "
                                 "as gb18030: pass --input_encoding=gb18030)")]

    three_bad = one_bad.replace("第8句。".encode(), bad_line).replace("第9句。".encode(), bad_line)
    path = write_bytes(tmp_path / "three_bad.txt", three_bad)
    with pytest.raises(textfiles.TextDecodeError) as e:
        list(read_text_documents([path]))
    assert str(e.value) == (f"{path}:7: bytes {bad_line!r} at byte offset "
                            f"{offset} are not valid utf-8 (they decode as "
                            "gb18030: pass --input_encoding=gb18030); 2 bad lines of the first "
                            "8 (such lines are skipped only up to one in 10,000 lines)")


def test_skipped_lines_reach_the_summary(chinese_vocab_file, tmp_path, caplog):
    """One undecodable line in 12,000 (3,000 documents of 3 sentences): skipped, counted once
    over both passes, reported in the summary and one warning."""
    lines = []
    for d in range(3000):
        lines += [f"第{d}篇第一句。", "第二句。", "第三句。", ""]
    data = "\n".join(lines).encode("utf-8").replace("第7篇第一句。".encode(), b"\xff\xfe bad", 1)
    path = write_bytes(tmp_path / "corpus.txt", data)
    offset = data.index(b"\xff")
    with caplog.at_level(logging.WARNING):
        stats, _ = create_pretraining_data(
            str(tmp_path / "out.tfrecord"), chinese_vocab_file, [path],
            instances.InstanceOptions(max_seq_length=32, dupe_factor=2), progress=False)
    assert (stats.documents, stats.sentences, stats.bad_lines) == (3000, 8999, 1)
    assert stats.summary().endswith(", 1 lines skipped for undecodable bytes")
    warnings = [r.getMessage() for r in caplog.records if "undecodable" in r.getMessage()]
    assert warnings == [f"skipped 1 line(s) with undecodable bytes (first: {path}:29: bytes "
                        f"b'\\xff\\xfe b' at byte offset {offset} are not valid "
                        "utf-8 (pass "
                        "--input_encoding=NAME with the file's encoding, or convert it to "
                        "UTF-8))"]


# --------------------------------------------------------------------------- build_vocab


def test_build_vocab_encoding_and_user_errors(gbk_documents, tmp_path, capsys):
    text = corpus_text(gbk_documents[:10])
    gbk = write_bytes(tmp_path / "gbk.txt", text.encode("gbk"))
    utf8 = write_bytes(tmp_path / "utf8.txt", (BOM + text).encode("utf-8"))
    empty = write_bytes(tmp_path / "empty.txt", b"\n\n")
    common = ["--vocab_size=400", "--no_progress"]
    code, err, _ = run_tool("build_vocab", [f"--input_file={gbk}",
                                         f"--vocab_file={tmp_path}/v_gbk.txt", *common], capsys)
    assert code == 2 and err.startswith(f"build_vocab.py: error: {gbk}:1: bytes ")
    assert "at byte offset 0" in err and "pass --input_encoding=gb18030" in err
    assert not os.path.exists(tmp_path / "v_gbk.txt")
    code, err, _ = run_tool("build_vocab", [f"--input_file={empty}",
                                         f"--vocab_file={tmp_path}/v_empty.txt", *common], capsys)
    assert (code, err) == (2, f"build_vocab.py: error: {empty}: no text (every line is blank); "
                              "expected one sentence per line\n")
    code, err, _ = run_tool("build_vocab", [f"--input_file={gbk}", "--input_encoding=nope",
                                         f"--vocab_file={tmp_path}/v.txt", *common], capsys)
    assert code == 2 and "unknown text encoding 'nope'" in err
    summaries = [tool("build_vocab").main([f"--input_file={path}", f"--vocab_file={out}",
                                           *common, *extra])
                 for path, out, extra in ((gbk, tmp_path / "a.txt", ["--input_encoding=gbk"]),
                                          (utf8, tmp_path / "b.txt", []))]
    assert summaries[0]["lines_skipped"] == 0
    assert vocab_lib.load_vocab(str(tmp_path / "a.txt")) == vocab_lib.load_vocab(
        str(tmp_path / "b.txt"))


def test_vocab_with_bom_or_in_gbk(chinese_vocab_file, tmp_path):
    tokens = vocab_lib.load_vocab(chinese_vocab_file)
    text = "\n".join(tokens) + "\n"
    bom = write_bytes(tmp_path / "bom.txt", (BOM + text).encode("utf-8"))
    assert vocab_lib.load_vocab(bom) == tokens
    gbk = write_bytes(tmp_path / "gbk.txt", text.encode("gb18030"))
    assert vocab_lib.load_vocab(gbk, encoding="gb18030") == tokens
    first = next(i for i, t in enumerate(tokens) if not t.isascii())
    offset = len("".join(t + "\n" for t in tokens[:first]))
    with pytest.raises(errors.UserError, match=rf"^{gbk}:{first + 1}: bytes .* at byte offset "
                                               rf"{offset} are not valid utf-8 \(they decode as "
                                               r"gb18030: pass --input_encoding=gb18030\)$"):
        vocab_lib.load_vocab(gbk)
    assert list(vocab_builder.read_text_files(bom)) == tokens


# --------------------------------------------------------------------------- structured files


ROWS = [("这本书很好", "positive", "值得一读"), ("太差了", "negative", "不推荐")]


def table(fmt: str, header: list[str], rows: list[tuple]) -> str:
    """A TSV, CSV or JSONL text with these column names."""
    if fmt == "jsonl":
        return "".join(json.dumps(dict(zip(header, row, strict=True)), ensure_ascii=False)
                       + "\n" for row in rows)
    if fmt == "tsv":
        return "".join("\t".join(r) + "\n" for r in [header, *rows])
    import io

    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows([header, *rows])
    return out.getvalue()


def read(tmp_path, name: str, text: str, written_as: str = "utf-8", **kwargs):
    path = write_bytes(tmp_path / name, text.encode(written_as))
    return [(e.text, e.label, e.text_b) for e in classification.read_examples(path, **kwargs)]


@pytest.mark.parametrize("fmt", ["tsv", "csv", "jsonl"])
def test_bom_header_case_and_encoding_give_the_same_examples(fmt, tmp_path):
    plain = table(fmt, ["text", "label", "text_b"], ROWS)
    assert read(tmp_path, f"a.{fmt}", plain) == ROWS
    assert read(tmp_path, f"b.{fmt}", BOM + plain) == ROWS
    assert read(tmp_path, f"c.{fmt}", table(fmt, [" TEXT", "Label ", "Text_B"], ROWS)) == ROWS
    assert read(tmp_path, f"d.{fmt}", plain, "gbk", encoding="gb18030") == ROWS
    # A test file (labels optional) with a BOM or a `Label` header keeps its labels (metrics).
    assert read(tmp_path, f"e.{fmt}", BOM + table(fmt, ["text", "Label", "text_b"], ROWS),
                labelled=False) == ROWS


@pytest.mark.parametrize("fmt, line", [("tsv", 2), ("csv", 2), ("jsonl", 1)])
def test_gbk_table_without_the_flag_names_file_and_line(fmt, line, tmp_path):
    path = write_bytes(tmp_path / f"gbk.{fmt}",
                       table(fmt, ["text", "label", "text_b"], ROWS).encode("gbk"))
    with pytest.raises(errors.UserError, match=rf"^{path}:{line}: bytes .* at byte offset \d+ "
                                               r"are not valid utf-8 \(they decode as gb18030: "
                                               r"pass --input_encoding=gb18030\)$"):
        classification.read_examples(path)


@pytest.mark.parametrize("fmt", ["tsv", "csv", "jsonl"])
@pytest.mark.parametrize("column", ["labels", "class", "target", "y", "category"])
def test_test_file_with_labels_under_another_name_is_an_error(fmt, column, tmp_path):
    text = table(fmt, ["text", column], [(t, lab) for t, lab, _ in ROWS])
    path = write_bytes(tmp_path / f"test.{fmt}", text.encode("utf-8"))
    with pytest.raises(errors.UserError) as e:
        classification.read_examples(path, labelled=False)
    assert str(e.value) == (
        f"{path}:1: column(s) [{column!r}] are none of text, label, text_b, id; a file read "
        "without required labels (a test file) has no 'label' column, and these may be its "
        "labels under another name, which would give predictions without test metrics: name "
        "the label column 'label', or remove the other column(s)")


def test_unlabelled_and_extra_columns(tmp_path, caplog):
    # A test file of text (and id) only: predictions only, no error.
    text = table("tsv", ["id", "text"], [("1", "好"), ("2", "差")])
    assert read(tmp_path, "test.tsv", text, labelled=False) == [("好", None, None),
                                                                ("差", None, None)]
    # Extra columns beside a label: ignored, with one warning naming them.
    text = table("tsv", ["text", "label", "source", "Notes"],
                 [("好", "positive", "web", "x"), ("差", "negative", "web", "y")])
    with caplog.at_level(logging.WARNING):
        assert read(tmp_path, "train.tsv", text) == [("好", "positive", None),
                                                     ("差", "negative", None)]
        assert read(tmp_path, "test2.tsv", text, labelled=False)[0] == ("好", "positive", None)
    assert caplog.messages == [
        f"{tmp_path / name}: ignored column(s) ['source', 'Notes']: tfbert reads text, label, "
        "text_b" for name in ("train.tsv", "test2.tsv")]


@pytest.mark.parametrize("name, text, message", [
    ("a.tsv", "好\tpositive\n差\tnegative\n",
     "a.tsv:1: the first row ['好', 'positive'] is not a header row: expected the column names "
     "text, label and optionally text_b and id, in any order; names are compared ignoring case "
     "and surrounding spaces"),
    ("b.csv", "\n\nsentence,label\n好,positive\n",
     "b.csv:3: header ['sentence', 'label'] has no 'text' column (expected columns text, label "
     "and optionally text_b and id, in any order; names are compared ignoring case and "
     "surrounding spaces)"),
    ("c.tsv", "text\tLabel\tlabel\n好\tpositive\tnegative\n",
     "c.tsv:1: columns 'Label' and 'label' are both 'label' (text, label and optionally text_b "
     "and id, in any order; names are compared ignoring case and surrounding spaces)"),
    ("d.jsonl", '{"text": "好", "Text": "差", "label": "positive"}\n',
     "d.jsonl:1: columns 'text' and 'Text' are both 'text'"),
    ("e.csv", "", "e.csv: empty file (expected a header row naming the columns text, label"),
])
def test_header_errors_say_what_was_expected(name, text, message, tmp_path):
    with pytest.raises(errors.UserError) as e:
        classification.read_examples(write_bytes(tmp_path / name, text.encode("utf-8")))
    assert str(e.value).startswith(f"{tmp_path}/{message}")


def test_conll_bom_and_encoding(tmp_path):
    text = "-DOCSTART- -X- O O\n\n北\tB-LOC\n京\tI-LOC\n很\tO\n\n美\tO\n"
    expected = [(("北", "京", "很"), ("B-LOC", "I-LOC", "O")), (("美",), ("O",))]
    for name, data, kwargs in (("a.txt", text.encode("utf-8"), {}),
                               ("b.txt", (BOM + text).encode("utf-8"), {}),
                               ("c.txt", text.encode("gbk"), {"encoding": "gb18030"})):
        examples = ner.read_conll(write_bytes(tmp_path / name, data), separator="", **kwargs)
        assert [(e.tokens, e.tags) for e in examples] == expected, name
    path = str(tmp_path / "c.txt")
    with pytest.raises(errors.UserError, match=rf"^{path}:3: bytes b'\\xb1\\xb1\\tB' at byte "
                                               r"offset 20 are not valid utf-8 \(they decode "
                                               r"as gb18030: pass --input_encoding=gb18030\)$"):
        ner.read_conll(path)


def test_squad_json_bom_encoding_and_error_lines(tmp_path):
    payload = {"version": "v1.1", "data": [{"title": "t", "paragraphs": [{
        "context": "北京是中国的首都。", "qas": [{"id": "q1", "question": "中国的首都是哪里？",
                                         "answers": [{"text": "北京", "answer_start": 0}]}]}]}]}
    text = json.dumps(payload, ensure_ascii=False, indent=1)
    datas = []
    for name, data, kwargs in (("a.json", text.encode("utf-8"), {}),
                               ("b.json", (BOM + text).encode("utf-8"), {}),
                               ("c.json", text.encode("gbk"), {"encoding": "gbk"})):
        data = qa_data.read_squad_json(write_bytes(tmp_path / name, data), **kwargs)
        datas.append([(e.qas_id, e.context, e.question, e.answers) for e in data.examples])
    assert datas[0] == datas[1] == datas[2] and datas[0][0][3] == [{"text": "北京",
                                                                    "answer_start": 0}]
    gbk = str(tmp_path / "c.json")
    with pytest.raises(errors.UserError, match=rf"^{gbk}:\d+: bytes .* are not valid utf-8"):
        qa_data.read_squad_json(gbk)
    broken = write_bytes(tmp_path / "broken.json", b'{"data": [\n {"title": "t",\n  "x": }\n]}')
    with pytest.raises(errors.UserError) as e:
        qa_data.read_squad_json(broken)
    assert str(e.value) == f"{broken}:3: not valid JSON (Expecting value at line 3 column 8)"


# --------------------------------------------------------------------------- textfiles


def test_utf16_files_are_read_and_suggested(tmp_path):
    text = "text\tlabel\n好\tpositive\n"
    path = write_bytes(tmp_path / "u16.tsv", text.encode("utf-16"))
    assert "".join(textfiles.read_lines(path, "utf-16")) == text
    assert read(tmp_path, "u16b.tsv", text, "utf-16", encoding="utf-16") == [("好", "positive",
                                                                              None)]
    with pytest.raises(textfiles.TextDecodeError, match=r"u16.tsv:1: .*the file starts with a "
                                                        r"UTF-16 byte-order mark: pass "
                                                        r"--input_encoding=utf-16"):
        list(textfiles.read_lines(path))
