"""The fine-tuning readers refuse what they would otherwise read wrong, in one line.

Each case is a file a user could plausibly hand over: a JSONL `text` that is a list, label sets
under `label`, labels that differ only in case or a NUL byte, blank SQuAD questions, a SQuAD file
without questions, one Chinese character per CoNLL line read as words, a folder where a file
belongs, UTF-16 without a byte-order mark, a TSV/CSV field over Python csv's limit. Each test
calls the reader itself and asserts the message (file, line, field, value, the flag to use);
one runs run_classifier.py to show the command line's exit 2 and single line.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys

import pytest

from tfbert import textfiles
from tfbert.data import classification, ner
from tfbert.data import squad as qa_data
from tfbert.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(tmp_path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return str(path)


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def refusal(read, *args, **kwargs) -> str:
    with pytest.raises(UserError) as e:
        read(*args, **kwargs)
    return str(e.value)


# --- 1. JSONL values that are not text ------------------------------------------------------


@pytest.mark.parametrize("field, value, found", [
    ("text", ["a", "b"], 'a list ["a", "b"]'),
    ("text", {"zh": "好"}, 'an object {"zh": "好"}'),
    ("text", 12, "a number 12"),
    ("text", True, "true"),
    ("text", None, "null"),
    ("text_b", ["x"], 'a list ["x"]'),
    ("text_b", {"k": 1}, 'an object {"k": 1}'),
])
def test_jsonl_text_that_is_not_a_string_is_refused(field, value, found, tmp_path):
    rows = [{"text": "好", "label": "positive"}, {"text": "差", "label": "negative"}]
    rows[1][field] = value
    path = write(tmp_path, "train.jsonl", jsonl(rows))
    assert refusal(classification.read_examples, path) == (
        f"{path}:2: {field!r} must be a string, got {found}")


def test_jsonl_strings_and_null_text_b_are_read_as_written(tmp_path):
    path = write(tmp_path, "train.jsonl", jsonl([
        {"text": " 好 ", "text_b": "对", "label": 1},
        {"text": "差", "text_b": "错", "label": "0"}]))
    rows = [(e.text, e.text_b, e.label) for e in classification.read_examples(path)]
    assert rows == [("好", "对", "1"), ("差", "错", "0")]
    path = write(tmp_path, "single.jsonl", jsonl([{"text": "好", "text_b": None, "label": "a"}]))
    assert classification.read_examples(path)[0].text_b is None


# --- 2. label sets under `label` ------------------------------------------------------------

MULTI_LABEL_HINT = ("a label set is read with --multi_label, from a 'labels' field (a JSON "
                    "list; in a TSV/CSV file, comma-separated names)")


def test_label_set_under_label_is_refused_and_points_to_multi_label(tmp_path):
    path = write(tmp_path, "train.jsonl", jsonl([
        {"text": "张三在北京", "label": ["LOC", "PER"]}]))
    assert refusal(classification.read_examples, path) == (
        f"{path}:1: 'label' must be one label name (a string or an integer), got a list "
        f'["LOC", "PER"]; {MULTI_LABEL_HINT}')
    tsv = write(tmp_path, "train.tsv", 'text\tlabel\n张三在北京\t["LOC", "PER"]\n')
    assert refusal(classification.read_examples, tsv) == (
        f"""{tsv}:2: label '["LOC", "PER"]' is a list of labels; {MULTI_LABEL_HINT}""")
    for value, found in (({"a": 1}, 'an object {"a": 1}'), (0.5, "a number 0.5"),
                         (False, "false")):
        path = write(tmp_path, "other.jsonl", jsonl([{"text": "好", "label": value}]))
        assert refusal(classification.read_examples, path) == (
            f"{path}:1: 'label' must be one label name (a string or an integer), got {found}")


def test_labels_field_in_a_single_label_file_points_to_multi_label(tmp_path):
    path = write(tmp_path, "train.jsonl", jsonl([{"text": "张三在北京", "labels": ["LOC", "PER"]}]))
    assert refusal(classification.read_examples, path) == (
        f"{path}:1: no 'label' field (has ['labels', 'text']); a 'labels' field holds label "
        "sets: pass --multi_label")
    read = classification.read_examples(path, multi_label=True)
    assert read[0].labels == ("LOC", "PER")


# --- 3. near-duplicate labels ---------------------------------------------------------------


@pytest.mark.parametrize("other, differ", [
    ("Positive", "case"),
    ("POSITIVE", "case"),
    ("posi tive", "whitespace"),
    ("ｐｏｓｉｔｉｖｅ", "Unicode form (NFKC)"),
    ("Posi tive", "case and whitespace"),
])
def test_labels_that_differ_only_in_case_spaces_or_form_are_refused(other, differ, tmp_path):
    path = write(tmp_path, "train.jsonl", jsonl(
        [{"text": f"t{i}", "label": label} for i, label in enumerate(
            ["positive", "negative", "positive", other, "negative"])]))
    examples = classification.read_examples(path)
    assert refusal(classification.label_list, examples) == (
        f"labels 'positive' (first at {path}:1, 2 example(s)) and {other!r} (first at "
        f"{path}:4, 1 example(s)) differ only in {differ}: make them one label in the data "
        "(a label set holding both is almost surely a mistake)")


def test_surrounding_spaces_are_one_label_and_distinct_labels_pass(tmp_path):
    path = write(tmp_path, "train.tsv", "text\tlabel\n好\tpositive\n行\t positive \n差\tnegative\n"
                                        "一般\tneutral\n")
    assert classification.label_list(classification.read_examples(path)) == [
        "negative", "neutral", "positive"]


@pytest.mark.parametrize("label, codes", [
    ("positive\u0000", "U+0000"), ("posi\u200btive", "U+200B"), ("\u0007positive", "U+0007"),
])
def test_control_characters_in_a_label_are_refused_where_they_occur(label, codes, tmp_path):
    path = write(tmp_path, "dev.jsonl", jsonl([{"text": "好", "label": "positive"},
                                               {"text": "行", "label": label}]))
    assert refusal(classification.read_examples, path, labelled=False) == (
        f"{path}:2: label {label!r} holds the control or invisible character(s) {codes}; a "
        "label is a visible name: remove them")
    multi = write(tmp_path, "multi.jsonl", jsonl([{"text": "好", "labels": ["A", label]}]))
    assert refusal(classification.read_examples, multi, multi_label=True).startswith(
        f"{multi}:1: label {label!r} holds the control")


def test_near_duplicates_across_label_sets(tmp_path):
    path = write(tmp_path, "train.jsonl", jsonl([{"text": "a", "labels": ["LOC", "PER"]},
                                                 {"text": "b", "labels": ["per"]},
                                                 {"text": "c", "labels": ["Org", "ORG "]}]))
    examples = classification.read_examples(path, multi_label=True)
    message = refusal(classification.label_list, examples)
    assert message.startswith(f"labels 'PER' (first at {path}:1, 1 example(s)) and 'per' "
                              f"(first at {path}:2, 1 example(s)) differ only in case")
    assert message.endswith("; also 'Org' / 'ORG'")


# --- 4. SQuAD: blank questions, no questions ------------------------------------------------


def squad_file(tmp_path, name: str, questions: list[tuple[str, str]]) -> str:
    context = "北京是中国的首都。"
    qas = [{"id": qid, "question": q, "answers": [{"text": "北京", "answer_start": 0}]}
           for qid, q in questions]
    payload = {"version": "v1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}
    return write(tmp_path, name, json.dumps(payload, ensure_ascii=False))


def test_blank_squad_questions_are_counted_and_not_trained_on(tmp_path, caplog):
    path = squad_file(tmp_path, "train.json", [("q1", "中国的首都是哪里？"), ("q2", ""),
                                               ("q3", "  \t"), ("q4", "首都？")])
    with caplog.at_level(logging.WARNING):
        data = qa_data.read_squad_json(path)
    assert [e.qas_id for e in data.examples] == ["q1", "q2", "q3", "q4"]
    assert [e.trainable for e in data.examples] == [True, False, False, True]
    assert data.problems == {"empty_question": ["q2", "q3"]}
    assert caplog.messages == [
        f"{path}: 2 question(s) with empty_question (the question text is empty or blank; not "
        "trained on, but predicted (from the context alone) and scored in dev/test): q2, q3"]
    # Scored: the blank questions keep their gold answers.
    assert qa_data.gold_answers(data.examples)["q2"] == ["北京"]


@pytest.mark.parametrize("payload, message", [
    ({"data": []}, "no questions (no paragraph in its 'data' list has 'qas')"),
    ({"data": [{"title": "t", "paragraphs": []}]},
     "no questions (no paragraph in its 'data' list has 'qas')"),
    ({"data": [{"paragraphs": [{"context": "x", "qas": []}]}]},
     "no questions (no paragraph in its 'data' list has 'qas')"),
    ({"data": ["x"]}, "data[0] must be an object with a 'paragraphs' list, got x"),
    ({"data": [{"paragraphs": [{"context": ["x"], "qas": []}]}]},
     "data[0].paragraphs[0]: 'context' must be a string and 'qas' a list, got list and list"),
    ({"data": [{"paragraphs": [{"context": "x", "qas": [
        {"id": "q1", "question": ["what"], "answers": []}]}]}]},
     """data[0].paragraphs[0]: question 'q1': 'question' must be a string, got ["what"]"""),
])
def test_squad_files_without_questions_or_with_non_text_are_one_line(payload, message,
                                                                     tmp_path):
    path = write(tmp_path, "dev.json", json.dumps(payload))
    assert refusal(qa_data.read_squad_json, path) == f"{path}: {message}"


@pytest.mark.slow  # ~40 s with the TensorFlow import: a tiny run_qa train + eval
def test_run_squad_skips_blank_questions_in_training_and_scores_them_in_eval(
        tmp_path, chinese_vocab_file):
    from tfbert.config import BertConfig
    from tfbert.tasks import qa as qa_task

    vocab_size = sum(1 for _ in open(chinese_vocab_file, encoding="utf-8"))
    config_file = tmp_path / "bert_config.json"
    BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=64, max_position_embeddings=64).to_json_file(str(config_file))
    train = squad_file(tmp_path, "train.json", [("t1", "首都？"), ("t2", " "), ("t3", "哪里？")])
    dev = squad_file(tmp_path, "dev.json", [("d1", "首都？"), ("d2", "")])
    results = qa_task.run_qa(qa_task.QAConfig(
        output_dir=str(tmp_path / "out"), bert_config_file=str(config_file),
        vocab_file=chinese_vocab_file, train_file=train, dev_file=dev, max_seq_length=32,
        doc_stride=16, max_query_length=8, num_train_epochs=1, train_batch_size=2,
        do_predict=False, verbose=0))
    assert results["train"]["num_examples"] == 2
    assert results["data"]["train"]["empty_question"] == 1
    assert results["data"]["dev"]["empty_question"] == 1
    assert results["dev"]["total"] == 2  # the blank question is predicted and scored
    predictions = json.loads((tmp_path / "out" / "dev_predictions.json").read_text("utf-8"))
    assert sorted(predictions) == ["d1", "d2"]


# --- 5. one Chinese character per CoNLL line, read as words ---------------------------------

CHAR_CONLL = "北\tB-LOC\n京\tI-LOC\n很\tO\n美\tO\n。\tO\n\n张\tB-PER\n三\tI-PER\n来\tO\n了\tO\n"


def test_character_conll_read_as_words_is_refused_with_the_flag(tmp_path):
    path = write(tmp_path, "train.txt", CHAR_CONLL)
    words = ner.read_conll(path)
    assert words[0].text == "北 京 很 美 。"  # what reading it as words would train on
    assert refusal(ner.check_char_level, words, path, char_level=False) == (
        f"{path}: 100% of its 9 tokens are single Chinese characters (one character per "
        "line, text written without spaces): pass --char_level. Read as words, each "
        "sentence's text would put a space between its characters, and the model (and its "
        "export) would read text as written as one word per sentence")
    chars = ner.read_conll(path, separator="")
    ner.check_char_level(chars, path, char_level=True)
    assert chars[0].text == "北京很美。"


@pytest.mark.parametrize("text", [
    "EU\tB-ORG\nrejects\tO\nGerman\tB-MISC\ncall\tO\n",  # English words
    "北京\tB-LOC\n很\tO\n美丽\tO\n的\tO\n城市\tO\n",  # segmented Chinese: words of 1-2 chars
    "北\tB-LOC\n\n京\tI-LOC\n",  # one token per sentence: no separator to choose
])
def test_word_conll_is_read_as_words(text, tmp_path):
    path = write(tmp_path, "train.txt", text)
    ner.check_char_level(ner.read_conll(path), path, char_level=False)


def test_run_ner_load_data_refuses_character_conll_without_char_level(tmp_path):
    from tfbert.tasks.ner import NerConfig, load_data

    train = write(tmp_path, "train.txt", CHAR_CONLL)
    dev = write(tmp_path, "dev.txt", "EU\tB-ORG\nrejects\tO\n")
    config = dict(output_dir=str(tmp_path / "out"), train_file=train, dev_file=dev)
    assert "pass --char_level" in refusal(load_data, NerConfig(**config))
    splits = load_data(NerConfig(**config, char_level=True))
    assert splits["train"][1].text == "张三来了"


# --- 6. unclear messages: a folder, UTF-16 without a BOM, long fields -----------------------


def test_a_directory_where_a_file_belongs(tmp_path):
    folder = tmp_path / "train.tsv"
    folder.mkdir()
    expected = f"{folder} is a directory, expected a file"
    assert refusal(classification.read_examples, str(folder)) == expected
    assert refusal(ner.read_conll, str(folder)) == expected
    assert refusal(qa_data.read_squad_json, str(folder)) == expected
    assert refusal(lambda p: list(textfiles.read_lines(p)), str(folder)) == expected
    assert refusal(classification.read_examples, f"{tmp_path}/") == (
        f"{tmp_path}/ is a directory, expected a file")
    with pytest.raises(FileNotFoundError, match="missing.tsv"):
        classification.read_examples(str(tmp_path / "missing.tsv"))


@pytest.mark.parametrize("name, text", [
    ("train.tsv", "text\tlabel\n好\tpositive\n差\tnegative\n"),
    ("train.jsonl", jsonl([{"text": "好", "label": "positive"}])),
    ("train.txt", "北\tB-LOC\n京\tI-LOC\n"),
])
@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_names_the_encoding(name, text, encoding, tmp_path):
    path = write(tmp_path, name, text.encode(encoding))
    read = ner.read_conll if name.endswith(".txt") else classification.read_examples
    assert refusal(read, path) == (
        f"{path}: looks like UTF-16 without a byte-order mark (a NUL byte in every other "
        f"position), not utf-8: convert it to UTF-8 or pass --input_encoding={encoding}")
    assert len(read(path, encoding=encoding)) >= 1  # the flag it names reads it


def test_utf16_guess_needs_the_pattern(tmp_path):
    """UTF-8 with a stray NUL, and UTF-16 with a BOM, are not taken for BOM-less UTF-16;
    Chinese lines without a BOM are (the NUL of each line break)."""
    assert textfiles.utf16_without_bom("text\tlabel\n好\x00\tpositive\n".encode()) is None
    assert textfiles.utf16_without_bom(("北京很美。\n" * 8).encode("utf-16")) is None  # BOM
    assert textfiles.utf16_without_bom(("北京很美。\n" * 8).encode("utf-16-le")) == "utf-16-le"
    assert textfiles.utf16_without_bom("ab\ncd\nef\ngh\n".encode("utf-16-le")) == "utf-16-le"
    path = write(tmp_path, "nul.tsv", "text\tlabel\n好\x00\tpositive\n")
    assert classification.read_examples(path)[0].text == "好\x00"


def test_long_tsv_fields_are_read_and_long_csv_fields_name_the_line(tmp_path):
    long = "好" * 200_000  # over Python csv's 131,072-character field limit
    path = write(tmp_path, "train.tsv", f"text\tlabel\n短\tpositive\n{long}\tnegative\n")
    examples = classification.read_examples(path)
    assert [len(e.text) for e in examples] == [1, 200_000]
    assert csv.field_size_limit() == 131_072  # lifted for the TSV read only
    path = write(tmp_path, "train.csv", f"text,label\n短,positive\n{long},negative\n")
    assert refusal(classification.read_examples, path) == (
        f"{path}:3: a field is longer than 131,072 characters, Python csv's limit for CSV (it "
        "stops an unclosed quote from swallowing the rest of the file): check the quotes, or "
        "write the data as TSV or JSONL, which have no such limit")
    path = write(tmp_path, "train.jsonl", jsonl([{"text": long, "label": "negative"}]))
    assert len(classification.read_examples(path)[0].text) == 200_000


# --- the command line -----------------------------------------------------------------------


@pytest.mark.slow  # ~25 s, most of it importing TensorFlow in a fresh process
def test_run_classifier_prints_one_line_and_exits_2(tmp_path):
    """The command line's view of case 1: exit 2, one `error:` line, no traceback, no output."""
    path = write(tmp_path, "train.jsonl", jsonl([{"text": "好", "label": "positive"},
                                                 {"text": ["差"], "label": "negative"}]))
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, os.path.join(REPO, "run_classifier.py"),
                          f"--train_file={path}", f"--dev_file={path}", f"--output_dir={out}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 2, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("run_classifier")]
    assert len(errors) == 1 and errors[0].startswith(
        f"run_classifier.py: error: {path}:2: 'text' must be a string, got a list [\"差\"]")
    assert not os.path.exists(out / "results.json")
