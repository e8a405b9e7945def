"""Makes the google-research/bert format golden records that tests/test_google_records.py reads.

Run from the repo root (needs the google-research/bert mirror, fetched with the `fetch` tool as
github:google-research/bert; the tests that read the files do not):

    .venv/bin/python tests/make_google_records_golden.py [/work/.mirror/google-research+bert/repo]

It runs google-research/bert's own `create_pretraining_data.py` and `tokenization.py`, read from
commit eedf5716ce1268e56f0a50264a88cafad334ac61 of that bare git repository and written to a
temporary folder, under TensorFlow 2: a stand-in `tensorflow` module gives them the few TF1 names
they use (`flags` = absl flags, `gfile.GFile/Glob`, `logging`, `python_io.TFRecordWriter`, the
`train.Example` protos); nothing else of the scripts is changed. It writes, in
tests/data/google_records/:

  corpus.txt          the input: a few documents (Chinese and English sentences, one per line, a
                      blank line between documents)
  vocab.txt           a small WordPiece vocab: specials, every character of the Chinese lines, the
                      English words and a few `##` pieces
  pretrain.tfrecord   google's records for max_seq_length 32, max_predictions_per_seq 5,
                      dupe_factor 5, masked_lm_prob 0.15, short_seq_prob 0.1, random_seed 12345,
                      do_lower_case, token-level masking
  README.md           the command and the commit

Rerun only when the corpus or the settings change (the files are committed, a few KB).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "google_records")
MIRROR = "/work/.mirror/google-research+bert/repo"
COMMIT = "eedf5716ce1268e56f0a50264a88cafad334ac61"
SETTINGS = dict(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=5, masked_lm_prob=0.15,
                short_seq_prob=0.1, random_seed=12345)

DOCUMENTS = [
    ["今天天气很好，我们去公园散步。", "公园里有很多人在跑步。", "孩子们在草地上玩耍。",
     "我们走到湖边坐下来休息。"],
    ["The model reads text in both directions.", "It learns by predicting masked words.",
     "Pretraining takes many steps on a large corpus.", "Fine tuning needs far fewer steps."],
    ["这家酒店的房间很干净。", "服务员的态度也非常好。", "早餐的种类不多，但是味道不错。",
     "下次来北京还会住这里。"],
    ["我们在学习中文。", "老师每天给我们讲一个故事。", "The story was about a small cat.",
     "大家都很喜欢这个故事。", "下课以后我们一起去吃饭。"],
    ["Records hold token ids and masks.", "Other trainers read them as they are.",
     "北京是中国的首都。", "上海是一个很大的城市。"],
    ["这本书写得很好。", "作者讲了一个关于家庭的故事。", "我用了两天时间读完了它。"],
]
ENGLISH_PIECES = ["##s", "##ing", "##ed", "##er", "##ly"]


def _vocab() -> list[str]:
    chars, words = [], []
    for doc in DOCUMENTS:
        for line in doc:
            for token in line.lower().replace(".", " . ").replace(",", " , ").split():
                if token.isascii():
                    words.append(token)
                else:
                    chars.extend(ch for ch in token)
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(5)] + ["[UNK]", "[CLS]", "[SEP]",
                                                                "[MASK]"]
    for token in sorted(set(chars)) + sorted(set(words)) + ENGLISH_PIECES:
        if token not in tokens:
            tokens.append(token)
    return tokens


def _tf1_stand_in():
    """The TF1 names google-research/bert's two scripts use, from TF2 and absl."""
    import tensorflow as tf
    from absl import flags, logging

    gfile = types.SimpleNamespace(GFile=tf.io.gfile.GFile, Glob=tf.io.gfile.glob)
    tf_logging = types.SimpleNamespace(info=logging.info, INFO=logging.INFO,
                                       set_verbosity=logging.set_verbosity)
    train = types.SimpleNamespace(Feature=tf.train.Feature, Features=tf.train.Features,
                                  Example=tf.train.Example, Int64List=tf.train.Int64List,
                                  FloatList=tf.train.FloatList)
    return types.SimpleNamespace(flags=flags, gfile=gfile, logging=tf_logging,
                                 python_io=types.SimpleNamespace(
                                     TFRecordWriter=tf.io.TFRecordWriter), train=train)


def _run_google(mirror: str, code_dir: str, argv: list[str]) -> None:
    for name in ("create_pretraining_data.py", "tokenization.py"):
        source = subprocess.run(["git", "-C", mirror, "show", f"{COMMIT}:{name}"], check=True,
                                capture_output=True).stdout
        with open(os.path.join(code_dir, name), "wb") as f:
            f.write(source)
    import tensorflow  # noqa: F401 - loaded before the stand-in takes its name

    real_tf = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = _tf1_stand_in()
    sys.path.insert(0, code_dir)
    try:
        import create_pretraining_data as google
    finally:
        sys.modules["tensorflow"] = real_tf
        sys.path.remove(code_dir)
    google.FLAGS(argv)
    google.main(None)


def main(mirror: str = MIRROR) -> None:
    os.makedirs(OUT, exist_ok=True)
    corpus = os.path.join(OUT, "corpus.txt")
    vocab = os.path.join(OUT, "vocab.txt")
    records = os.path.join(OUT, "pretrain.tfrecord")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(doc) for doc in DOCUMENTS) + "\n")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(_vocab()) + "\n")
    argv = ["create_pretraining_data.py", f"--input_file={corpus}", f"--output_file={records}",
            f"--vocab_file={vocab}", "--do_lower_case=true", "--do_whole_word_mask=false"]
    argv += [f"--{k}={v}" for k, v in SETTINGS.items()]
    with tempfile.TemporaryDirectory() as code_dir:
        _run_google(mirror, code_dir, argv)
    command = " ".join(argv).replace(OUT + os.sep, "")
    with open(os.path.join(OUT, "README.md"), "w", encoding="utf-8") as f:
        f.write("# google-research/bert format golden records\n\n"
                "Made by `tests/make_google_records_golden.py` (see its docstring), which runs\n"
                f"google-research/bert's create_pretraining_data.py at commit {COMMIT} as\n\n"
                f"    python {command}\n")
    print(f"wrote {records} ({os.path.getsize(records)} bytes)")


if __name__ == "__main__":
    main(*sys.argv[1:])
