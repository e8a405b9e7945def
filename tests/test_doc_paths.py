"""Every repository path that README.md, docs/*.md and the docstrings and comments of tfbert/,
bench/, data_tools/ and the top-level scripts name exists.

A path is `dir/.../name.ext` whose first folder is one of the repository's own (tfbert/,
bench/, experiments/, tests/, docs/, data_tools/), or a bare `name.py` / `NAME.md`, which must
be a file of the repository (at its root or, for a bare name, anywhere in it) unless it names
another project's file (EXTERNAL); a bare lower-case `name.md` is a file a command writes. A
markdown link's target is resolved from the page's folder.
Skipped: URLs, placeholders (`<name>`, `{split}`, an upper-case folder or file stem such as NAME),
wildcards, and what commands create (output/, saved_models/, cache/: not repository folders).
"""

from __future__ import annotations

import ast
import glob
import io
import os
import re
import tokenize

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOTS = ("tfbert", "bench", "experiments", "tests", "docs", "data_tools")
EXTENSIONS = "py|md|json|txt|toml|png|tsv|cfg|sh|ya?ml|safetensors|tfrecord"
# a path rooted at one of ROOTS, or a bare file name
ROOTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(ROOTS)})/[\w./*{{}}<>-]*?\.(?:{EXTENSIONS}))"
                    r"(?![\w/-])")
BARE = re.compile(r"(?<![\w./<{*-])([A-Za-z_][\w-]*\.py|[A-Z][A-Z_]*\.md)(?![\w/-])")
LINK = re.compile(r"\]\(([\w./-]+)(?:#[^)]*)?\)")
URL = re.compile(r"\w+://\S+")
# files of other projects that the text names by their own names
EXTERNAL = {
    "tokenization.py", "modeling.py", "optimization.py", "run_classifier_with_tfhub.py",
    "modeling_bert.py", "evaluate-v2.0.py", "evaluate-v1.1.py", "cmrc2018_evaluate.py",
    "extract_features.py", "run_pretraining.py", "run_squad.py", "run_classifier.py",
    "create_pretraining_data.py", "model.py", "train.py", "configuration_bert.py",
    "tokenization_bert.py", "clue.py", "conftest.py", "__init__.py", "__main__.py", "setup.py",
}


def repository_files() -> set[str]:
    found = set()
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in
                   ("__pycache__", "output", "saved_models", "cache", "build")]
        found.update(os.path.relpath(os.path.join(folder, f), REPO) for f in files)
    return found


FILES = repository_files()
BASENAMES = {os.path.basename(f) for f in FILES}


def placeholder(path: str) -> bool:
    *folders, name = path.split("/")
    stem, ext = os.path.splitext(name)
    return (any(c in path for c in "<>{}*") or any(re.fullmatch(r"[A-Z_]+", p) for p in folders)
            or (ext != ".md" and re.fullmatch(r"[A-Z_]+", stem) is not None))


def named_paths(text: str) -> list[str]:
    """Repository paths named in `text` (see the module docstring)."""
    text = URL.sub(" ", text)
    paths = [p.rstrip(".") for p in ROOTED.findall(text)]
    paths += [b for b in BARE.findall(text) if b not in EXTERNAL]
    return [p for p in paths if not placeholder(p)]


def missing(paths: list[str], base: str = "") -> list[str]:
    out = []
    for path in paths:
        if path in FILES or os.path.isdir(os.path.join(REPO, path)):
            continue
        if "/" not in path and path in BASENAMES:
            continue
        out.append(path)
    return out


def python_text(path: str) -> str:
    """The docstrings and comments of a Python file, one per line."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    pieces = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                pieces.append(doc)
    return "\n".join(pieces)


def documents() -> list[str]:
    names = ["README.md"] + sorted(glob.glob("docs/*.md", root_dir=REPO))
    return [n for n in names if n != "docs/results.md"]  # (generated; its paths are checked
    # by tests/test_results_doc.py's sections, one per bench/results/ file)


def python_files() -> list[str]:
    names = sorted(glob.glob("*.py", root_dir=REPO))
    for root in ("tfbert", "bench", "data_tools"):
        names += sorted(glob.glob(f"{root}/**/*.py", root_dir=REPO, recursive=True))
    return names


@pytest.mark.parametrize("name", documents())
def test_paths_in_documents_exist(name):
    path = os.path.join(REPO, name)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    bad = missing(named_paths(text))
    for target in LINK.findall(URL.sub(" ", text)):
        if ":" in target or placeholder(target):
            continue
        resolved = os.path.normpath(os.path.join(os.path.dirname(name), target))
        if resolved not in FILES and not os.path.isdir(os.path.join(REPO, resolved)):
            bad.append(f"link {target}")
    assert not bad, f"{name} names paths that do not exist: {sorted(set(bad))}"


def test_paths_in_docstrings_and_comments_exist():
    bad = {}
    for name in python_files():
        gone = missing(named_paths(python_text(os.path.join(REPO, name))))
        if gone:
            bad[name] = sorted(set(gone))
    assert not bad, f"docstrings and comments name paths that do not exist: {bad}"


def test_the_rule_finds_paths_and_skips_placeholders_and_urls():
    text = ("see bench/NOTES.md, tfbert/export/saved_model.py and STYLE.md; not "
            "https://github.com/google-research/bert/blob/master/run_squad.py, "
            "saved_models/NAME/1/x.json, output/run/results.json, bench/results/<machine>.json, "
            "tests/data/{split}.json, tokenization.py or `docs/x.md`.")
    assert named_paths(text) == ["bench/NOTES.md", "tfbert/export/saved_model.py",
                                 "docs/x.md", "STYLE.md"]
    assert missing(named_paths(text)) == ["bench/NOTES.md", "docs/x.md", "STYLE.md"]
