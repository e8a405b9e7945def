"""Makes the golden file that tfbert's GLUE/XNLI readers (tfbert.data.task_folders) are checked
against, with google-research/bert's own run_classifier.py processors as the oracle.

Run from the repo root (needs google-research/bert's git repository, fetched as a bare git dir;
the tests that read the files need neither it nor this script):

    .venv/bin/python tests/make_google_classifier_golden.py \
        [--bert_repo=/work/.mirror/google-research+bert/repo]

It writes
  tests/data/google_classifier/MRPC, CoLA, MNLI, XNLI/
                         tiny task folders (a few rows per file) in the exact layouts
                         google-research/bert reads: MRPC's headered train/dev/test.tsv, CoLA's
                         header-less train/dev.tsv and headered test.tsv, MNLI's train.tsv,
                         dev_matched.tsv, dev_mismatched.tsv and test_matched.tsv, XNLI's
                         multinli/multinli.train.{zh,de}.tsv (with "contradictory") and
                         xnli.dev.tsv / xnli.test.tsv rows in zh, de and en;
  tests/data/google_classifier/golden.json
                         per task (xnli per language): the processor's label list, and per split
                         the example count and every example's [text_a, text_b, label].

The processors run unchanged: run_classifier.py, tokenization.py, modeling.py and
optimization.py are read from the git commit recorded in golden.json (SOURCE_COMMIT below is the
one the committed file was made from) into a temporary folder and imported under a
`tensorflow` shim: tf.compat.v1 with absl's `flags` and `gfile.Open` = `tf.io.gfile.GFile`
(TF2 has neither `tf.flags` nor `tf.gfile`). MNLI's dev_mismatched.tsv, which google's processor
never reads, goes through the same processor's `_create_examples`. Google has no XNLI test
reader, so xnli.test.tsv has no golden entry.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "google_classifier")
DEFAULT_REPO = "/work/.mirror/google-research+bert/repo"
SOURCE_COMMIT = "eedf5716ce1268e56f0a50264a88cafad334ac61"

MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
MNLI_COLUMNS = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse"
                "\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2")
XNLI_HEADER = ("language\tgold_label\tsentence1_binary_parse\tsentence2_binary_parse"
               "\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2\tpromptID\tpairID\tgenre")


def _mnli_row(i: int, a: str, b: str, labels: list[str]) -> str:
    return "\t".join([str(i), str(100 + i), f"{100 + i}e", "fiction", f"( {a} )", f"( {b} )",
                      f"(ROOT {a})", f"(ROOT {b})", a, b, *labels])


def _xnli_row(lang: str, label: str, a: str, b: str, i: int) -> str:
    return "\t".join([lang, label, "", "", "", "", a, b, str(i), f"{i}n", "facetoface"])


FILES = {
    "MRPC/train.tsv": [MRPC_HEADER,
                       "1\t702876\t702977\tAmrozi accused his brother.\tHe accused his brother.",
                       "0\t2108705\t2108831\tYucaipa owned Dominick's.\tYucaipa bought it in 1995.",
                       '1\t1330381\t1330521\tHe said "no".\t"No," he said.',
                       "0\t3344667\t3344648\tThe stock rose 5%.\tShares fell."],
    "MRPC/dev.tsv": [MRPC_HEADER,
                     "1\t1355540\t1355592\tHe is a man.\tThe man is he.",
                     "0\t2029631\t2029565\tIt rained today.\tThe sun was out.",
                     "1\t487993\t487952\tThe cat sat.\tA cat was sitting."],
    "MRPC/test.tsv": ["index\t#1 ID\t#2 ID\t#1 String\t#2 String",
                      "0\t1089874\t1089925\tPCCW's chief said no.\tThe chief declined.",
                      "1\t3019446\t3019327\tThe bank cut rates.\tRates were cut by the bank.",
                      "2\t1945605\t1945824\tBirds fly south.\tFish swim."],
    "CoLA/train.tsv": ["gj04\t1\t\tOur friends won't buy this analysis.",
                       "gj04\t0\t*\tOne more pseudo generalization and I'm giving up.",
                       "gj04\t1\t\tThe sailors rode the breeze clear of the rocks.",
                       'gj04\t0\t*\tThey drank the pub "dry".'],
    "CoLA/dev.tsv": ["gj04\t1\t\tThe weights made the rope stretch.",
                     "gj04\t0\t*\tThe more you eat, the most you want.",
                     "gj04\t1\t\tBill rolled out of the room."],
    "CoLA/test.tsv": ["index\tsentence", "0\tBill whistled past the house.",
                      "1\tThe car honked its way down the road."],
    "MNLI/train.tsv": [f"{MNLI_COLUMNS}\tlabel1\tgold_label",
                       _mnli_row(0, "A man sleeps.", "A person rests.", ["entailment"] * 2),
                       _mnli_row(1, "A dog runs.", "A cat sleeps.", ["contradiction"] * 2),
                       _mnli_row(2, "Kids play.", "Kids play outside.", ["neutral"] * 2),
                       _mnli_row(3, 'He said "yes".', "He agreed.", ["entailment"] * 2)],
    "MNLI/dev_matched.tsv": [
        f"{MNLI_COLUMNS}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
        _mnli_row(10, "The sky is blue.", "The sky has a colour.", ["entailment"] * 6),
        _mnli_row(11, "She reads.", "She is asleep.", ["contradiction"] * 6),
        _mnli_row(12, "A boy eats.", "A boy eats lunch.", ["neutral"] * 6)],
    "MNLI/dev_mismatched.tsv": [
        f"{MNLI_COLUMNS}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
        _mnli_row(20, "The letter arrived.", "Mail came.", ["entailment"] * 6),
        _mnli_row(21, "It is noon.", "It is midnight.", ["contradiction"] * 6)],
    "MNLI/test_matched.tsv": [MNLI_COLUMNS,
                              _mnli_row(30, "A bird sings.", "A bird is silent.", []),
                              _mnli_row(31, "Two men talk.", "People speak.", [])],
    "XNLI/multinli/multinli.train.zh.tsv": ["premise\thypo\tlabel",
                                            "一个人在睡觉。\t有人在休息。\tentailment",
                                            "狗在跑。\t猫在睡觉。\tcontradictory",
                                            "孩子们在玩。\t孩子们在外面玩。\tneutral"],
    "XNLI/multinli/multinli.train.de.tsv": ["premise\thypo\tlabel",
                                            "Ein Mann schläft.\tJemand ruht.\tentailment",
                                            "Ein Hund rennt.\tEine Katze schläft.\tcontradictory"],
    "XNLI/xnli.dev.tsv": [XNLI_HEADER,
                          _xnli_row("de", "neutral", "Er isst.", "Er isst Brot.", 1),
                          _xnli_row("zh", "entailment", "天是蓝的。", "天有颜色。", 2),
                          _xnli_row("en", "contradiction", "She reads.", "She sleeps.", 3),
                          _xnli_row("zh", "contradiction", "她在读书。", "她睡着了。", 4),
                          _xnli_row("zh", "neutral", "男孩在吃饭。", "男孩在吃午饭。", 5),
                          _xnli_row("de", "entailment", "Es regnet.", "Es ist nass.", 6)],
    "XNLI/xnli.test.tsv": [XNLI_HEADER,
                           _xnli_row("zh", "entailment", "鸟在唱歌。", "鸟发出声音。", 7),
                           _xnli_row("en", "neutral", "Two men talk.", "Two men talk loudly.", 8),
                           _xnli_row("zh", "contradiction", "现在是中午。", "现在是半夜。", 9)],
}


def write_folders() -> None:
    for name, lines in FILES.items():
        path = os.path.join(OUT, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(lines) + "\n")


def import_google_run_classifier(repo: str, commit: str) -> types.ModuleType:
    """google-research/bert's run_classifier module, imported from `commit` under a TF shim."""
    import tensorflow as real_tf
    from absl import flags

    class Shim(types.ModuleType):
        def __getattr__(self, name: str):
            return getattr(real_tf.compat.v1, name)

    shim = Shim("tensorflow")
    shim.flags = flags
    shim.gfile = types.SimpleNamespace(Open=real_tf.io.gfile.GFile, GFile=real_tf.io.gfile.GFile,
                                       MakeDirs=real_tf.io.gfile.makedirs)
    folder = tempfile.mkdtemp(prefix="google-bert-")
    for name in ("run_classifier.py", "tokenization.py", "modeling.py", "optimization.py"):
        source = subprocess.run(["git", "-C", repo, "show", f"{commit}:{name}"], check=True,
                                capture_output=True, text=True).stdout
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(source)
    sys.modules["tensorflow"] = shim
    sys.path.insert(0, folder)
    import run_classifier  # noqa: PLC0415  (google-research/bert's, from the temp folder)

    return run_classifier


def golden(google: types.ModuleType) -> dict:
    def rows(examples):
        return {"count": len(examples),
                "examples": [[e.text_a, e.text_b, e.label] for e in examples]}

    tasks = {}
    for name, folder, processor in (("mrpc", "MRPC", google.MrpcProcessor()),
                                    ("cola", "CoLA", google.ColaProcessor()),
                                    ("mnli", "MNLI", google.MnliProcessor())):
        data_dir = os.path.join(OUT, folder)
        splits = {"train": rows(processor.get_train_examples(data_dir)),
                  "dev": rows(processor.get_dev_examples(data_dir)),
                  "test": rows(processor.get_test_examples(data_dir))}
        if name == "mnli":
            lines = processor._read_tsv(os.path.join(data_dir, "dev_mismatched.tsv"))
            splits["dev_mismatched"] = rows(processor._create_examples(lines, "dev_mismatched"))
        tasks[name] = {"labels": processor.get_labels(), "splits": splits}
    for language in ("zh", "de"):
        processor = google.XnliProcessor()
        processor.language = language
        data_dir = os.path.join(OUT, "XNLI")
        tasks[f"xnli_{language}"] = {
            "labels": processor.get_labels(),
            "splits": {"train": rows(processor.get_train_examples(data_dir)),
                       "dev": rows(processor.get_dev_examples(data_dir))}}
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bert_repo", default=DEFAULT_REPO)
    parser.add_argument("--commit", default=SOURCE_COMMIT)
    args = parser.parse_args()
    write_folders()
    google = import_google_run_classifier(args.bert_repo, args.commit)
    result = {"source": {"repository": "google-research/bert", "commit": args.commit,
                         "file": "run_classifier.py"},
              "tasks": golden(google)}
    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
