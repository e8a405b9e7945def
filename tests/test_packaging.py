"""The installable package: the wheel's contents (every module, the data files, the commands,
the dependencies), the argparse commands' --help, `import tfbert` staying cheap, the export of a
run's output directory, and (slow) the wheel installed with its dependencies into a fresh venv,
every command run from outside the checkout."""

from __future__ import annotations

import ast
import configparser
import email.parser
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from packaging.requirements import Requirement

import tfbert

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST_INFO = f"tfbert-{tfbert.__version__}.dist-info"
# Command -> (its entry point, a flag its --help lists).
COMMANDS = {
    "tfbert-pretrain": ("tfbert.cli.pretrain:entry", "--num_train_steps"),
    "tfbert-classifier": ("tfbert.cli.classifier:entry", "--init_checkpoint"),
    "tfbert-ner": ("tfbert.cli.ner:entry", "--init_checkpoint"),
    "tfbert-squad": ("tfbert.cli.squad:entry", "--doc_stride"),
    "tfbert-embedding": ("tfbert.cli.embedding:entry", "--loss"),
    "tfbert-distill": ("tfbert.cli.distill:entry", "--teacher_dir"),
    "tfbert-export": ("tfbert.export.__main__:entry", "--model_dir"),
    "tfbert-build-vocab": ("tfbert.cli.build_vocab:entry", "--vocab_size"),
    "tfbert-builtin-corpus": ("tfbert.cli.builtin_corpus:entry", "--output_file"),
    "tfbert-create-pretraining-data": ("tfbert.cli.create_pretraining_data:entry",
                                       "--dupe_factor"),
}
# The files the package reads with importlib.resources.
DATA_FILES = ("tfbert/export/data/tf_core_ops.txt", "tfbert/export/data/tf_changed_attrs.txt",
              "tfbert/text/data/unicode_classes.txt")
# Imported only when present, for one optional format: not a dependency.
OPTIONAL_IMPORTS = {"torch"}  # pytorch_model.bin checkpoints (tfbert/checkpoints/hf.py)


def package_files() -> set[str]:
    """The files of tfbert/ in the checkout (bytecode aside), as wheel paths."""
    found = set()
    for root, dirs, files in os.walk(os.path.join(REPO, "tfbert")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found.update(os.path.relpath(os.path.join(root, f), REPO).replace(os.sep, "/")
                     for f in files if not f.endswith(".pyc"))
    return found


def clean_env() -> dict[str, str]:
    """The environment for a command that must not see the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONNOUSERSITE": "1"}


@pytest.fixture(scope="module")
def wheel_file(tmp_path_factory) -> str:
    """The wheel built (no dependencies, no build isolation) from a copy of pyproject.toml,
    README.md and tfbert/ only: what it needs from the checkout is exactly that."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(REPO, name), source / name)
    shutil.copytree(os.path.join(REPO, "tfbert"), source / "tfbert",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                          "--no-build-isolation", "--quiet", "-w", str(root / "dist"),
                          str(source)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    [name] = os.listdir(root / "dist")
    assert name == f"tfbert-{tfbert.__version__}-py3-none-any.whl"
    return str(root / "dist" / name)


def wheel_text(wheel: str, name: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(name).decode("utf-8")


def test_wheel_holds_every_module_and_data_file(wheel_file):
    with zipfile.ZipFile(wheel_file) as z:
        names = set(z.namelist())
    assert set(DATA_FILES) <= names
    assert {n for n in names if n.startswith("tfbert/")} == package_files()
    assert {n for n in names if not n.startswith("tfbert/")} == {
        f"{DIST_INFO}/{n}" for n in ("METADATA", "WHEEL", "entry_points.txt", "top_level.txt",
                                     "RECORD")}
    assert wheel_text(wheel_file, f"{DIST_INFO}/top_level.txt").split() == ["tfbert"]


def test_wheel_commands(wheel_file):
    """entry_points.txt names every command, and each target is a function of its module that
    takes no arguments."""
    parser = configparser.ConfigParser()
    parser.read_string(wheel_text(wheel_file, f"{DIST_INFO}/entry_points.txt"))
    assert dict(parser["console_scripts"]) == {k: v[0] for k, v in COMMANDS.items()}
    for target, _ in COMMANDS.values():
        module, function = target.split(":")
        tree = ast.parse(wheel_text(wheel_file, module.replace(".", "/") + ".py"))
        [node] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
        assert not node.args.args and not node.args.kwonlyargs, target


def test_wheel_metadata(wheel_file):
    """Name, version, Python range, README, the dependency ranges and extras; every
    third-party module the package imports is a declared dependency."""
    meta = email.parser.Parser().parsestr(wheel_text(wheel_file, f"{DIST_INFO}/METADATA"))
    assert (meta["Name"], meta["Version"]) == ("tfbert", tfbert.__version__)
    assert set(meta["Requires-Python"].split(",")) == {">=3.10", "<3.13"}
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith("# tfbert\n")
    requirements = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    core = {r.name: r for r in requirements if r.marker is None}
    extras = {}
    for r in requirements:
        if r.marker is not None:
            extra = str(r.marker).split("==")[1].strip().strip("\"'")
            extras.setdefault(extra, {})[r.name] = r
    assert set(core) == {"tensorflow", "tensorflow-text", "keras", "keras-hub",
                         "tensorflow-datasets", "safetensors", "numpy", "absl-py", "tqdm",
                         "jieba", "snownlp", "bm25s", "scikit-learn", "matplotlib", "threadpoolctl"}
    for r in core.values():  # compatible ranges: a floor and a ceiling
        assert {s.operator for s in r.specifier} == {">=", "<"}, r
    assert set(extras) == {"test", "bench", "jax"}
    assert str(extras["test"]["seqeval"].specifier) in ("<2,>=1.2", ">=1.2,<2")
    assert {"pytest", "tokenizers", "tensorflow-serving-api"} <= set(
        extras["test"])
    for r in core.values():
        assert core[r.name].specifier.contains(importlib.metadata.version(r.name)), r

    declared = set(core) | {name for group in extras.values() for name in group}
    distributions = importlib.metadata.packages_distributions()
    with zipfile.ZipFile(wheel_file) as z:
        sources = [z.read(n) for n in z.namelist() if n.endswith(".py")]
    imported = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"tfbert"} - OPTIONAL_IMPORTS
    assert third_party, "no imports found"
    for module in sorted(third_party):
        # A module of an extra that is not installed here (matplotlib without [bench]) is
        # named by its own distribution name.
        names = set(distributions.get(module, [])) or {module}
        assert names & declared, f"{module} is imported but not a dependency in pyproject.toml"


def test_argparse_commands_state_their_defaults():
    """--help of the argparse commands gives every flag's default (or says it is required)."""
    from tfbert.cli import build_vocab, create_pretraining_data
    from tfbert.export import __main__ as export_main
    from tfbert.text import vocab_builder

    for parser in (build_vocab.build_parser(), create_pretraining_data.build_parser(),
                   export_main.build_parser()):
        for action in parser._actions:
            if not action.option_strings or action.help in (None, "==SUPPRESS==") or (
                    action.option_strings == ["-h", "--help"]):
                continue
            text = parser._get_formatter()._expand_help(action)
            assert ("(required)" if action.required else "default") in text, (
                action.option_strings, text)
    text = " ".join(build_vocab.build_parser().format_help().split())
    assert f"(default: {vocab_builder.DEFAULT_VOCAB_SIZE})" in text
    assert "--input_encoding INPUT_ENCODING text encoding of the input files, e.g. gb18030 " \
           "(default: utf-8)" in text
    text = " ".join(create_pretraining_data.build_parser().format_help().split())
    assert "(default: 10)" in text and "keep NotNext at 50%" in text  # dupe_factor, %% kept
    assert "usage: tfbert-export" in export_main.build_parser("tfbert-export").format_help()


_LAZY_PROBE = """
import json, sys
import tfbert
out = {"after_import": sorted({"tensorflow", "keras", "numpy", "tensorflow_text"}
                              & set(sys.modules))}
out["packages"] = [tfbert.data.__name__, tfbert.export.__name__, tfbert.training.__name__,
                   tfbert.tasks.__name__]
out["names"] = [callable(tfbert.export.export_model), tfbert.data.corpora.__name__,
                "pretraining_dataset" in dir(tfbert.data), "PretrainConfig" in dir(tfbert.training)]
out["after_packages"] = sorted({"tensorflow", "keras", "tensorflow_text"} & set(sys.modules))
try:
    out["submodules"] = [tfbert.data.ner.__name__, tfbert.export.layout.__name__,
                         tfbert.training.config.__name__, tfbert.tasks.registry.__name__]
except AttributeError as e:
    out["submodules"] = str(e)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def lazy_probe(tmp_path_factory) -> dict:
    """What a fresh `import tfbert` loads, and which attributes then work (outside the repo)."""
    run = subprocess.run([sys.executable, "-c", _LAZY_PROBE], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path_factory.mktemp("elsewhere"), env=clean_env())
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_import_tfbert_is_cheap_and_lazy(lazy_probe):
    assert lazy_probe["after_import"] == []
    assert lazy_probe["packages"] == ["tfbert.data", "tfbert.export", "tfbert.training",
                                      "tfbert.tasks"]
    assert lazy_probe["names"] == [True, "tfbert.data.corpora", True, True]
    assert lazy_probe["after_packages"] == []


def test_submodules_load_on_first_use(lazy_probe):
    assert lazy_probe["submodules"] == ["tfbert.data.ner", "tfbert.export.layout",
                                        "tfbert.training.config", "tfbert.tasks.registry"]


def test_export_takes_a_run_dir(tmp_path, chinese_vocab_file, caplog):
    """--model_dir may be a run's output_dir: its model/ folder is exported (one log line says
    so); with neither, the error names both paths."""
    from tfbert.export import load_for_export

    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    config = tfbert.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=64)
    model = tfbert.BertClassifier(tfbert.BertEncoder(config), num_classes=3)
    run_dir = tmp_path / "run"
    tfbert.save_pretrained(model, str(run_dir / "model"), vocab_file=chinese_vocab_file,
                           metadata={"task": "classification", "labels": ["a", "b", "c"],
                                     "max_seq_length": 32})
    (run_dir / "results.json").write_text("{}")
    with caplog.at_level(logging.INFO, logger="tfbert.export"):
        loaded, vocab_file, spec, _ = load_for_export(str(run_dir))
    assert vocab_file == str(run_dir / "model" / "vocab.txt")
    assert (spec.task, spec.labels, spec.seq_length) == ("classification", ["a", "b", "c"], 32)
    assert loaded.count_params() == model.count_params()
    notes = [r.getMessage() for r in caplog.records if r.name == "tfbert.export"]
    assert notes == [f"{run_dir} holds no model; exporting the run's model folder "
                     f"{run_dir / 'model'}"]
    empty = tmp_path / "empty"
    (empty / "model").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as error:
        load_for_export(str(empty))
    assert str(error.value).startswith(f"{empty}: no vocab.txt, and {empty / 'model'} is no "
                                       "tfbert model directory")
    with pytest.raises(FileNotFoundError, match="missing: no such model directory"):
        load_for_export(str(tmp_path / "missing"))


# --- the wheel installed on its own --------------------------------------------------------------


def command(venv: str, name: str, *args: str, cwd: str, expect: int = 0
            ) -> subprocess.CompletedProcess:
    """Runs the venv's command `name` in `cwd`; asserts its exit status is `expect`."""
    run = subprocess.run([os.path.join(venv, "bin", name), *args], capture_output=True,
                         text=True, cwd=cwd, env=clean_env(), timeout=900)
    assert run.returncode == expect, f"{name} {args}: {run.stderr[-3000:]}"
    return run


@pytest.mark.slow
def test_wheel_in_a_fresh_venv(wheel_file, tmp_path):
    """The wheel and its dependencies (pip's index or cache) in a new venv; from a folder that
    is not the checkout: every command's --help, then vocab -> pretraining records -> 2
    pretraining steps -> a classifier fine-tuned from them on the built-in data -> the export
    of that run's output directory."""
    from tfbert.data import corpora

    venv, work = str(tmp_path / "venv"), tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    install = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install",
                              "--quiet", wheel_file], capture_output=True, text=True,
                             env=clean_env(), timeout=1800)
    assert install.returncode == 0, install.stderr[-3000:]
    where = command(venv, "python", "-c", "import sys, tfbert; print(tfbert.__file__); "
                    "print(sorted({'tensorflow', 'keras'} & set(sys.modules)))", cwd=str(work))
    assert where.stdout.split("\n")[:2] == [
        os.path.join(venv, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}",
                     "site-packages", "tfbert", "__init__.py"), "[]"]

    for name, (_, flag) in COMMANDS.items():
        run = command(venv, name, "--help", cwd=str(work), expect=0)
        text = run.stdout + run.stderr
        assert flag in text and "default" in text, (name, text[-2000:])

    docs = [d for d in corpora.people_daily_documents() if len(d) >= 2][:150]
    (work / "corpus.txt").write_text("\n\n".join("\n".join(d) for d in docs) + "\n",
                                     encoding="utf-8")
    run = command(venv, "tfbert-build-vocab", "--input_file=corpus.txt", "--vocab_file=vocab.txt",
                  "--vocab_size=1500", "--no_progress", cwd=str(work))
    summary = json.loads(run.stdout)
    assert summary["vocab_size"] == 1500
    with open(work / "vocab.txt", encoding="utf-8") as f:
        tokens = f.read().splitlines()
    assert len(tokens) == 1500 and tokens[0] == "[PAD]"
    run = command(venv, "tfbert-create-pretraining-data", "--input_file=corpus.txt",
                  "--output_file=pretrain.tfrecord", "--vocab_file=vocab.txt",
                  "--max_seq_length=32", "--dupe_factor=1", "--no_progress", cwd=str(work))
    assert run.stdout.startswith("wrote 1 file(s): pretrain.tfrecord")
    (work / "bert_config.json").write_text(json.dumps(dict(
        vocab_size=1500, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64)))
    command(venv, "tfbert-pretrain", "--input_file=pretrain.tfrecord", "--vocab_file=vocab.txt",
            "--bert_config_file=bert_config.json", "--output_dir=pretrain",
            "--max_seq_length=32", "--max_predictions_per_seq=5", "--train_batch_size=8",
            "--num_train_steps=2", "--num_warmup_steps=1", "--save_checkpoints_steps=2",
            "--nodo_eval", "--distribution_strategy=one_device", "--mixed_precision=float32",
            cwd=str(work))
    with open(work / "pretrain" / "pretrain_results.json", encoding="utf-8") as f:
        pretrained = json.load(f)
    assert (pretrained["global_step"], pretrained["examples_trained"]) == (2, 16)
    command(venv, "tfbert-classifier", "--init_checkpoint=pretrain/model", "--output_dir=cls",
            "--max_seq_length=32", "--train_batch_size=16", "--num_train_epochs=1",
            "--max_train_examples=32", "--max_eval_examples=16",
            "--distribution_strategy=one_device", cwd=str(work))
    with open(work / "cls" / "results.json", encoding="utf-8") as f:
        results = json.load(f)
    assert results["test"]["num_examples"] == 16
    assert results["labels"] == ["negative", "positive"]
    run = command(venv, "tfbert-export", "--model_dir=cls", "--export_dir=saved_models/cls",
                  cwd=str(work))
    assert run.stdout.startswith("SavedModel: saved_models/cls/1 (version 1; task "
                                 "classification, max_seq_length 32, float32)")
    assert "cls holds no model; exporting the run's model folder cls/model" in run.stderr
    assert (work / "saved_models" / "cls" / "1" / "saved_model.pb").is_file()


def test_setup_py_shim_reads_pyproject():
    """`python setup.py --version` (older tooling) prints the version pyproject.toml takes from
    tfbert.__version__; setup.py itself defines nothing."""
    run = subprocess.run([sys.executable, "setup.py", "--version"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == tfbert.__version__
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        calls = [node for node in ast.walk(ast.parse(f.read())) if isinstance(node, ast.Call)]
    assert [(c.func.id, c.args, c.keywords) for c in calls] == [("setup", [], [])]
