"""One ownership rule for every writing command (tfbert.ownership): a command writes a folder only
if it is new, empty or a run of the same kind, a file only if it is new or tfbert wrote it (or
with --overwrite), and never over or into one of its inputs. Every refusal is one line naming
the path, exit code 2, and leaves the user's files byte for byte as they were."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable

import pytest

from tfbert import ownership
from tfbert.errors import UserError
from tfbert.pretraining_data import instances
from tfbert.pretraining_data.instance_files import create_pretraining_data
from tfbert.pretraining_data.vocab_corpus import build_vocab_file
from tfbert.tasks.classification import ClassificationConfig, run_classification
from tfbert.tasks.ner import NerConfig, run_ner
from tfbert.tasks.qa import QAConfig, run_qa
from tfbert.text import vocab_builder
from tfbert.training import outputs, resume
from tfbert.training.pretrain import PretrainConfig, run_pretraining

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
CORPUS = "你好世界。\n今天天气很好。\n\n我们去公园。\n公园里有花。\n\n他在读书。\n书很有意思。\n"


VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n你\n好\n"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A tiny encoder saved by tfbert, with VOCAB as its vocab.txt."""
    import tfbert

    root = tmp_path_factory.mktemp("tiny_model")
    (root / "vocab.txt").write_text(VOCAB, encoding="utf-8")
    encoder = tfbert.BertEncoder(tfbert.BertConfig(
        vocab_size=7, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16))
    tfbert.save_pretrained(encoder, str(root / "model"), vocab_file=str(root / "vocab.txt"))
    return str(root / "model")


@pytest.fixture
def inputs(tmp_path, tiny_model):
    """A command's inputs: a corpus, a vocab, a model config, training files of each task, a
    records file and an init_checkpoint folder (the checks run before the data is read)."""
    root = tmp_path / "in"
    shutil.copytree(tiny_model, root / "model")
    files = {"corpus": CORPUS, "vocab": VOCAB,
             "config": json.dumps({"vocab_size": 7}), "tsv": "text\tlabel\n好\tpositive\n",
             "conll": "你 B-PER\n好 O\n", "json": json.dumps({"data": []}),
             "records": "not really records"}
    paths = {}
    for name, text in files.items():
        paths[name] = str(root / f"{name}.txt")
        (root / f"{name}.txt").write_text(text, encoding="utf-8")
    paths["model"] = str(root / "model")
    return paths


# --- the commands, as library calls ----------------------------------------------------------

def _pretrain(out: str, p: dict, **kw) -> None:
    run_pretraining(PretrainConfig(output_dir=out, input_file=p["records"],
                                   vocab_file=p["vocab"], init_checkpoint=p["model"],
                                   num_train_steps=1, num_warmup_steps=0, verbose=0))


def _finetune(run: Callable, config_cls: type, data: str) -> Callable:
    def call(out: str, p: dict, **kw) -> None:
        run(config_cls(output_dir=out, train_file=p[data], vocab_file=p["vocab"],
                       init_checkpoint=p["model"], learning_rate=1e-3, verbose=0))
    return call


def _build_vocab(out: str, p: dict, overwrite: bool = False) -> None:
    build_vocab_file(out, input_file=p["corpus"], vocab_size=120, min_frequency=1,
                     show_progress=False, overwrite=overwrite)


def _create_data(out: str, p: dict, overwrite: bool = False) -> None:
    create_pretraining_data(out, p["vocab"], [p["corpus"]],
                            instances.InstanceOptions(max_seq_length=32, dupe_factor=1),
                            progress=False, overwrite=overwrite)


# name: (kind of output, the call, the kind of run a folder of "another kind" holds)
FOLDER_COMMANDS = {
    "tfbert-pretrain": (_pretrain, "classification"),
    "tfbert-classifier": (_finetune(run_classification, ClassificationConfig, "tsv"),
                          "pretraining"),
    "tfbert-ner": (_finetune(run_ner, NerConfig, "conll"), "classification"),
    "tfbert-squad": (_finetune(run_qa, QAConfig, "json"), "ner"),
}
FILE_COMMANDS = {
    "tfbert-build-vocab": _build_vocab,
    "tfbert-create-pretraining-data": _create_data,
}


def _snapshot(root) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under root, hidden ones too."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(folder, name), root)] = None
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = f.read()
    return found


def _refused(call: Callable, out: str, inputs: dict, root, match: str, **kw) -> str:
    """Runs `call`, asserts a one-line UserError naming `out` that contains `match`, and that
    nothing under root changed; returns the message."""
    before = _snapshot(root)
    with pytest.raises(UserError) as caught:
        call(out, inputs, **kw)
    message = str(caught.value)
    assert "\n" not in message and out in message, message
    assert match in message, message
    assert _snapshot(root) == before  # byte-identical, and nothing new (no lock, no sidecar)
    return message


# --- what a folder holds ---------------------------------------------------------------------

def _user_folder(path) -> None:
    """A user's folder: a model and pretraining results no tfbert run recorded."""
    (path / "model").mkdir(parents=True)
    (path / "model" / "weights.bin").write_bytes(b"\x00user weights")
    (path / "pretrain_results.json").write_text('{"mine": 1}')


def _run_folder(path, kind: str) -> None:
    """A finished run of `kind`: a fine-tuning commit (tfbert_run.json) or a pretraining run's
    record (pretrain_config.json), with its model."""
    if kind == ownership.PRETRAINING:
        (path / "model").mkdir(parents=True)
        (path / "model" / "weights.bin").write_bytes(b"pretrained")
        (path / resume.RUN_CONFIG_FILE).write_text(json.dumps(
            {"input_files": ["records.txt (18 bytes)"], "config": {"init_checkpoint": None}}))
        return
    with outputs.staged(str(path), kind) as run:
        os.makedirs(run.path("model"))
        with open(os.path.join(run.path("model"), "weights.bin"), "wb") as f:
            f.write(b"fine-tuned")
        with open(run.path("results.json"), "w") as f:
            f.write('{"accuracy": 0.9}')


@pytest.mark.parametrize("command", sorted(FOLDER_COMMANDS))
def test_run_folder_refusals(command, inputs, tmp_path):
    """Each run command refuses the same cases, one line naming the folder, nothing touched."""
    call, other_kind = FOLDER_COMMANDS[command]
    root = tmp_path
    # An input as output_dir: the init_checkpoint folder, and a link to it.
    _refused(call, inputs["model"], inputs, root, "is also the init_checkpoint")
    os.symlink(inputs["model"], tmp_path / "link")
    _refused(call, str(tmp_path / "link"), inputs, root, "is also the init_checkpoint")
    # Inside an input folder.
    _refused(call, os.path.join(inputs["model"], "run"), inputs, root,
             "is inside the init_checkpoint folder")
    # A user's folder (model/ and pretrain_results.json): nothing of it is replaced.
    _user_folder(tmp_path / "user")
    _refused(call, str(tmp_path / "user"), inputs, root,
             "holds model, pretrain_results.json, and no tfbert run record")
    # A run of another kind.
    _run_folder(tmp_path / "other", other_kind)
    _refused(call, str(tmp_path / "other"), inputs, root, f"holds a {other_kind} run")
    # An existing file.
    (tmp_path / "file").write_text("a file")
    _refused(call, str(tmp_path / "file"), inputs, root, "is a file; output_dir names the folder")
    # A damaged or foreign record.
    (tmp_path / "cut").mkdir()
    manifest = json.dumps({"run_id": "r", "task": "ner", "outputs": ["model"]}, indent=2)
    (tmp_path / "cut" / outputs.MANIFEST).write_text(manifest[:30])
    message = _refused(call, str(tmp_path / "cut"), inputs, root,
                       f"{tmp_path / 'cut' / outputs.MANIFEST} is not valid JSON (truncated?)")
    assert message.endswith("it should be tfbert's run manifest: restore it, or move it away")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / outputs.MANIFEST).write_text('{"name": "my project"}')
    _refused(call, str(tmp_path / "foreign"), inputs, root,
             f"{tmp_path / 'foreign' / outputs.MANIFEST} is not tfbert's run manifest (no "
             "'task'); tfbert did not write it")
    (tmp_path / "cutpre").mkdir()
    (tmp_path / "cutpre" / resume.RUN_CONFIG_FILE).write_text('{"input_files": ["a", ')
    _refused(call, str(tmp_path / "cutpre"), inputs, root,
             f"{tmp_path / 'cutpre' / resume.RUN_CONFIG_FILE} is not valid JSON (truncated?)")


def test_table_generators_replace_only_their_own_files(tmp_path):
    """data_tools' table generators: a table is replaced when its header says the generator
    wrote it; another file of that name, or a dump read as input, is refused."""
    sys.path.insert(0, os.path.join(REPO, "data_tools"))
    import make_serving_op_tables as tables

    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps({"tensorflow": "2.12.1", "core_ops": {"Add": ["T"]}}))
    args = [str(dump), f"--output_dir={tmp_path}", "--name_releases=2.12.1"]
    (tmp_path / "tf_core_ops.txt").write_text("my op list\n")
    _refused(lambda out, p: tables.main(args), str(tmp_path / "tf_core_ops.txt"), {}, tmp_path,
             "exists and tfbert did not write it (or it changed since: its header does not "
             "say 'Generated by data_tools/make_serving_op_tables.py')")
    assert tables.main([*args, "--overwrite"]) == 0
    assert (tmp_path / "tf_core_ops.txt").read_text() == tables.CORE_OPS_HEADER + "Add 2.12.1\n"
    assert tables.main(args) == 0  # its own tables now
    dump.rename(tmp_path / "tf_core_ops.txt")
    _refused(lambda out, p: tables.main([out, *args[1:]]), str(tmp_path / "tf_core_ops.txt"),
             {}, tmp_path, "is also the dump")
    pytest.importorskip("tokenizers")
    import make_tokenizer_tables

    (tmp_path / "classes.txt").write_text("mine\n")
    _refused(lambda out, p: make_tokenizer_tables.main([f"--output={out}"]),
             str(tmp_path / "classes.txt"), {}, tmp_path, "exists and tfbert did not write it")


def _export(out: str, p: dict, **kw) -> None:
    from tfbert.export.layout import version_folder  # the export's own rule, read only

    version_folder(out)


def test_export_refuses_the_same_cases(inputs, tmp_path):
    """tfbert-export (its own rule, tfbert.export.layout): the model folder it reads, a user's
    folder, a run folder and a file are refused, one line naming the path."""
    _refused(_export, inputs["model"], inputs, tmp_path, "holds config.json")
    _user_folder(tmp_path / "user")
    _refused(_export, str(tmp_path / "user"), inputs, tmp_path, "holds model")
    _run_folder(tmp_path / "run", "classification")
    _refused(_export, str(tmp_path / "run"), inputs, tmp_path, "is no model's folder")
    (tmp_path / "file").write_text("a file")
    _refused(_export, str(tmp_path / "file"), inputs, tmp_path, "is a file")


def test_export_refuses_a_folder_inside_its_model_dir(inputs, tmp_path):
    from tfbert.export import export_model  # refused before the model is read

    def export(out: str, p: dict) -> None:
        export_model(p["model"], out)

    _refused(export, os.path.join(inputs["model"], "export"), inputs, tmp_path, "inside")


@pytest.mark.parametrize("kind", ["pretraining", "classification", "ner", "qa"])
def test_a_run_folder_of_the_same_kind_is_writable(kind, tmp_path):
    """New, empty (tfbert's own leftovers aside) and same-kind folders pass; a run's own
    model as init_checkpoint (an eval-only run, a pretraining resume) is no conflict."""
    assert ownership.claim_folder(str(tmp_path / "new"), kind) is None
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".tfbert.lock").write_text("")  # a kill before anything was written
    (tmp_path / "empty" / ".tfbert-run-20250101-000000-abcdef").mkdir()
    (tmp_path / "empty" / ".pretrain_config.json.tmp-ab12_x9z").write_text("{")
    assert ownership.claim_folder(str(tmp_path / "empty"), kind) is None
    out = tmp_path / "run"
    _run_folder(out, kind)
    (out / "notes.txt").write_text("mine")  # a user's file in a run folder: kept, as always
    own_model = {"init_checkpoint": str(out / "model"), "vocab_file": str(out / "model")}
    assert ownership.claim_folder(str(out), kind, own_model) == kind
    assert ownership.folder_kind(str(out)) == kind


def test_a_commit_cut_short_is_its_runs_kind(tmp_path):
    """A folder whose commit journal is all that names its run (killed between the journal and
    the manifest) belongs to that run's kind."""
    out = tmp_path / "run"
    out.mkdir()
    (out / outputs.JOURNAL).write_text(json.dumps({"run": {"task": "ner", "run_id": "r"}}))
    assert ownership.claim_folder(str(out), "ner") == "ner"
    with pytest.raises(UserError, match="holds a ner run"):
        ownership.claim_folder(str(out), "qa")


@pytest.mark.parametrize("command", sorted(FILE_COMMANDS))
def test_output_file_refusals(command, inputs, tmp_path):
    """Each file-writing command refuses the same cases, one line naming the path."""
    call = FILE_COMMANDS[command]
    root = tmp_path
    _refused(call, inputs["corpus"], inputs, root, "is also the input_file; a command never "
             "writes over one of its inputs")
    os.symlink(inputs["corpus"], tmp_path / "link.txt")
    _refused(call, str(tmp_path / "link.txt"), inputs, root,
             f"is also the input_file ({inputs['corpus']})")
    if command == "tfbert-create-pretraining-data":  # the vocab is an input too
        _refused(call, inputs["vocab"], inputs, root, "is also the vocab_file")
    (tmp_path / "notes.txt").write_text("my notes")
    _refused(call, str(tmp_path / "notes.txt"), inputs, root,
             "exists and tfbert did not write it (or it changed since: no matching "
             ".notes.txt.tfbert.json beside it); pass --overwrite")
    # A file tfbert wrote and a user changed since: its record no longer matches.
    (tmp_path / "changed.txt").write_text("tfbert's")
    ownership.record_file(str(tmp_path / "changed.txt"))
    (tmp_path / "changed.txt").write_text("the user's")
    _refused(call, str(tmp_path / "changed.txt"), inputs, root, "exists and tfbert did not")
    (tmp_path / "folder").mkdir()
    _refused(call, str(tmp_path / "folder"), inputs, root, "is a folder")


def test_overwrite_and_own_files_let_the_file_commands_write(tmp_path, inputs):
    """--overwrite replaces a user's file (then tfbert's record is beside it); a file tfbert
    wrote is replaced by a rerun without it."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a user's list\n")
    _build_vocab(str(vocab), inputs, overwrite=True)
    assert vocab.read_text().startswith("[PAD]\n") and ownership.is_owned_file(str(vocab))
    record = json.loads((tmp_path / ".vocab.txt.tfbert.json").read_text())
    assert record["file"] == "vocab.txt" and record["bytes"] == vocab.stat().st_size
    _build_vocab(str(vocab), inputs)  # its own file: replaced without overwrite
    inputs = dict(inputs, vocab=str(vocab))
    records = tmp_path / "data.tfrecord"
    records.write_text("a user's file")
    _create_data(str(records), inputs, overwrite=True)
    assert ownership.is_owned_file(str(records))
    first = records.read_bytes()
    _create_data(str(records), inputs)
    assert records.read_bytes() == first  # the same input and seed: the same records


def test_globs_leave_out_tfberts_records_and_temp_files(tmp_path):
    """tf.io.gfile.glob("data/*") matches hidden files; tfbert's readers leave them out, as a
    shell does, so a folder of shards with their records reads as the shards."""
    from tfbert.pretraining_data import records

    (tmp_path / "a.txt").write_text("一句话\n")
    (tmp_path / ".a.txt.tfbert.json").write_text("{}\n")
    (tmp_path / ".b.txt.tmp-1234").write_text("half\n")
    assert records.expand_file_pattern(str(tmp_path / "*")) == [str(tmp_path / "a.txt")]
    assert list(vocab_builder.read_text_files(str(tmp_path / "*"))) == ["一句话"]
    assert records.expand_file_pattern(str(tmp_path / ".a*")) == [
        str(tmp_path / ".a.txt.tfbert.json")]  # named: kept


def test_a_resume_refuses_another_init_checkpoint_naming_both(tmp_path):
    """A resume trains on from its own checkpoint, so another init_checkpoint (or one given to a
    run started from a random init) is refused naming both; the same one, or none, resumes and
    the record keeps the init the run started from."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[MASK]\na\n")
    first = PretrainConfig(output_dir=str(tmp_path), vocab_file=str(vocab),
                           init_checkpoint="first/model")
    settings = resume.run_settings(first, [str(vocab)], str(vocab), True, None)
    resume.write_run_config(str(tmp_path), first, settings, {}, None)
    latest = str(tmp_path / "checkpoints" / "ckpt-40")
    record_file = tmp_path / resume.RUN_CONFIG_FILE

    def again(init_checkpoint, **changes):
        return PretrainConfig(output_dir=str(tmp_path), vocab_file=str(vocab),
                              init_checkpoint=init_checkpoint, **changes)

    for allowed in (False, True):  # allow_changed_settings does not let it through
        with pytest.raises(UserError) as refused:
            resume.check_resume(str(tmp_path), again("other/model",
                                                     allow_changed_settings=allowed),
                                settings, latest)
        assert str(refused.value) == (
            f"{tmp_path} holds a checkpoint (step 40) of a run started from init_checkpoint "
            "first/model, not init_checkpoint other/model: a resume trains on from its own "
            "checkpoint and would not load other/model. Use a new --output_dir to start from "
            "other/model, or rerun with --init_checkpoint=first/model to resume "
            f"(see {record_file}).")
    for same in ("first/model", "./first/model/", os.path.abspath("first/model"), None):
        assert resume.check_resume(str(tmp_path), again(same), settings, latest) == {}
    resumed = again(None, num_train_steps=2000)
    resume.write_run_config(str(tmp_path), resumed, settings, {}, latest)
    record = json.loads(record_file.read_text())
    assert record["config"]["init_checkpoint"] == "first/model"
    assert record["config"]["num_train_steps"] == 2000  # what may change is the new value

    resume.write_run_config(str(tmp_path), again(None), settings, {}, None)  # a random init
    with pytest.raises(UserError, match=r"of a run started from a random init, not "
                       r"init_checkpoint first/model: .* or rerun without --init_checkpoint "
                       r"to resume"):
        resume.check_resume(str(tmp_path), first, settings, latest)


# --- through the command lines ---------------------------------------------------------------

@pytest.mark.slow  # seven processes that import TensorFlow (110 s on 2 busy cores)
def test_each_command_refuses_with_one_line_and_exit_2(inputs, tmp_path):
    """One representative refusal per command: exit code 2, one line naming the path, no
    traceback, the user's files untouched."""
    import tfbert

    tiny = tfbert.BertConfig(vocab_size=7, hidden_size=16, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=32,
                             max_position_embeddings=16)
    model = tfbert.BertClassifier(tfbert.BertEncoder(tiny), num_classes=2)
    model_dir = tmp_path / "finetuned"
    tfbert.save_pretrained(model, str(model_dir), vocab_file=inputs["vocab"],
                           metadata={"task": "classification", "max_seq_length": 16})
    _user_folder(tmp_path / "user")
    _run_folder(tmp_path / "pretrained", ownership.PRETRAINING)
    (tmp_path / "file").write_text("a file")
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / outputs.MANIFEST).write_text('{"run_id": "r", "ta')
    python = [sys.executable]
    cases = {
        "run_pretraining.py": (python + ["run_pretraining.py", f"--input_file={inputs['records']}",
                                         f"--vocab_file={inputs['vocab']}",
                                         f"--output_dir={tmp_path / 'user'}"],
                               f"{tmp_path / 'user'} holds model, pretrain_results.json"),
        "run_classifier.py": (python + ["run_classifier.py", f"--train_file={inputs['tsv']}",
                                        f"--init_checkpoint={model_dir}",
                                        f"--output_dir={tmp_path / 'pretrained'}"],
                              f"{tmp_path / 'pretrained'} holds a pretraining run"),
        "run_ner.py": (python + ["run_ner.py", f"--train_file={inputs['conll']}",
                                 f"--init_checkpoint={model_dir}",
                                 f"--output_dir={tmp_path / 'file'}"],
                       f"{tmp_path / 'file'} is a file"),
        "run_squad.py": (python + ["run_squad.py", f"--train_file={inputs['json']}",
                                   "--do_train",
                                   f"--init_checkpoint={model_dir}",
                                   f"--output_dir={tmp_path / 'cut'}"],
                         f"{tmp_path / 'cut' / outputs.MANIFEST} is not valid JSON"),
        "build_vocab.py": (python + ["data_tools/build_vocab.py",
                                     f"--input_file={inputs['corpus']}",
                                     f"--vocab_file={inputs['corpus']}"],
                           f"{inputs['corpus']} is also the input_file"),
        "create_pretraining_data.py": (
            python + ["data_tools/create_pretraining_data.py",
                      f"--input_file={inputs['corpus']}", f"--output_file={inputs['corpus']}",
                      f"--vocab_file={inputs['vocab']}"],
            f"{inputs['corpus']} is also the input_file"),
        "tfbert-export": (python + ["-m", "tfbert.export", f"--model_dir={model_dir}",
                                    f"--export_dir={tmp_path / 'file'}"],
                          f"{tmp_path / 'file'} is a file"),
    }
    before = _snapshot(tmp_path)
    running = {name: subprocess.Popen(command, cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
               for name, (command, _) in cases.items()}
    for name, process in running.items():
        _, stderr = process.communicate(timeout=300)
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        assert process.returncode == 2, (name, stderr[-3000:])
        assert "Traceback" not in stderr, (name, stderr[-3000:])
        assert last.split(": error: ", 1)[-1].startswith(cases[name][1]), (name, last)
    assert _snapshot(tmp_path) == before
