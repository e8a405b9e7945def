"""The fine-tuning recipe grid: train each combination of a few values, keep the best by dev.

BERT's fine-tuning advice (Devlin et al., 2018, A.3) is a small grid: batch 16 or 32, 2-4
epochs, learning rate 2e-5 .. 5e-5, picked by the dev set. Two forms:

    # a task runner (run_classification, run_ner, run_qa) and its config
    results = run_grid(run_classification, ClassificationConfig(output_dir="out/sentiment", ...),
                       {"learning_rate": [2e-5, 3e-5, 5e-5], "train_batch_size": [16, 32]})
    results["grid"]["best"]                    # the chosen combination's name

    # a train-and-score function of one's own (model.fit inside)
    result = search(train_and_score, {"learning_rate": [2e-5, 5e-5]}, metric="accuracy")
    print(result.markdown())

Every combination runs with the same seed, so a grid gives the same scores each time it runs
with that seed (the run of one combination is the run its values give alone). Combinations go in
the order of the grid's keys, the first key slowest (itertools.product), and are named
`<k>-<short key><value>...` (`3-lr3e-05-bs16`; k is 1-based).

`run_grid` holds output_dir for the whole search (its lock and staged outputs,
`tfbert.training.finetune.task_run`): combination k runs in output_dir/grid/<name>/ (a complete
run folder of its own, staged inside output_dir's staging folder while the grid runs), only the
best combination's model/ is kept (the others are removed as soon as a better one is found),
and at the end output_dir holds, committed together, the best combination's outputs (model/,
predictions, logs/), results.json (the best combination's results with the whole grid under
"grid"), grid.md (the table) and grid/ (each combination's results.json, predictions and logs).
An interrupted or failed grid leaves output_dir as it was.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import logging
import math
import numbers
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras

from tfbert.errors import UserError
from tfbert.training import finetune as ft
from tfbert.training import outputs

logger = logging.getLogger(__name__)

__all__ = ["Combination", "GridResult", "GridRow", "check_grid", "combinations", "run_grid",
           "search"]

GRID_DIR = "grid"  # inside output_dir: one folder per combination
TABLE_FILE = "grid.md"
# Short names of the usual grid keys in combination names (others appear as `key_`).
SHORT_NAMES = {"learning_rate": "lr", "num_train_epochs": "ep", "train_batch_size": "bs",
               "head_hidden_layers": "hl", "head_hidden_size": "hs", "warmup_proportion": "wu",
               "weight_decay": "wd", "dropout": "dr", "max_seq_length": "len",
               "early_stopping_patience": "pat", "gradient_accumulation_steps": "acc",
               "seed": "seed"}


@dataclasses.dataclass
class Combination:
    """One point of the grid.

    Attributes:
        index: int. 1-based position in the grid's order.
        values: dict. Grid key -> this combination's value.
        name: str. `<index>-<short key><value>...` over the keys with more than one value; a
            folder name.
    """

    index: int
    values: dict[str, Any]
    name: str


@dataclasses.dataclass
class GridRow:
    """What one combination scored.

    Attributes:
        index, name, values: the Combination's.
        dev: float. The dev metric the grid picks by.
        test: float or None. The same metric on the test set (None where not scored).
        best_epoch: int or None. The epoch whose weights the combination kept.
        epochs: int or None. Epochs trained (fewer than asked when early stopping ended it).
        seconds: float. Wall time of the combination.
        run_id: str or None. The combination's run (`run_grid`).
    """

    index: int
    name: str
    values: dict[str, Any]
    dev: float
    test: float | None = None
    best_epoch: int | None = None
    epochs: int | None = None
    seconds: float = 0.0
    run_id: str | None = None


@dataclasses.dataclass
class GridResult:
    """A finished grid: every combination's row and the best one.

    Attributes:
        metric: str. The dev metric compared.
        higher_is_better: bool.
        keys: list of str. The grid's keys, in order.
        rows: list of GridRow, in the grid's order.
        best: int. Position in `rows` of the best combination (the first of equal scores).
        seed: int or None. The seed every combination ran with.
        best_model: the best combination's model, where the train-and-score function returns
            one (`search`); else None.
    """

    metric: str
    higher_is_better: bool
    keys: list[str]
    rows: list[GridRow]
    best: int
    seed: int | None = None
    best_model: Any = None

    @property
    def best_row(self) -> GridRow:
        return self.rows[self.best]

    def to_json(self) -> dict[str, Any]:
        """The grid as results.json holds it under "grid"."""
        return {"metric": self.metric, "higher_is_better": self.higher_is_better,
                "keys": self.keys, "seed": self.seed, "best": self.best_row.name,
                "best_values": self.best_row.values,
                "combinations": [dataclasses.asdict(row) for row in self.rows]}

    @classmethod
    def from_json(cls, grid: Mapping[str, Any]) -> GridResult:
        """The GridResult of `to_json`'s dict (results.json's "grid")."""
        rows = [GridRow(**row) for row in grid["combinations"]]
        best = next(i for i, row in enumerate(rows) if row.name == grid["best"])
        return cls(grid["metric"], grid["higher_is_better"], list(grid["keys"]), rows, best,
                   grid.get("seed"))

    def markdown(self, folder: str | None = None) -> str:
        """The grid as a markdown table, the best combination marked, then a line naming it.

        Args:
            folder: str or None. Where the combinations' folders are (e.g. "grid/"): adds a
                folder column.
        """
        m = self.metric
        optional = [(f"test {m}", "test", _score), ("best epoch", "best_epoch", _text),
                    ("epochs run", "epochs", _text)]  # shown where some row has a value
        optional = [c for c in optional if any(getattr(r, c[1]) is not None for r in self.rows)]
        columns = ["#", *self.keys, f"dev {m}", *(c[0] for c in optional), "time (s)",
                   *(["folder"] if folder is not None else [])]
        lines = [f"Grid search: {len(self.rows)} combinations, picked by dev {m} "
                 f"({'higher' if self.higher_is_better else 'lower'} is better)"
                 + (f"; seed {self.seed}" if self.seed is not None else "") + ".", "",
                 "| " + " | ".join(columns) + " |",
                 "|" + "|".join("---:" if c != "folder" else "---" for c in columns) + "|"]
        for i, row in enumerate(self.rows):
            cells = [f"**{row.index}** (best)" if i == self.best else str(row.index),
                     *(_value_text(row.values[k]) for k in self.keys), _score(row.dev),
                     *(show(getattr(row, name)) for _, name, show in optional),
                     f"{row.seconds:.0f}",
                     *([f"{folder}{row.name}"] if folder is not None else [])]
            lines.append("| " + " | ".join(cells) + " |")
        best = self.best_row
        lines += ["", f"Best: #{best.index} ({_values_text(best.values)}): dev {m} "
                  f"{_score(best.dev)}"
                  + (f", test {m} {_score(best.test)}" if best.test is not None else "") + "."]
        return "\n".join(lines) + "\n"


def check_grid(base_config: Any, grid: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """The grid as key -> list of values, checked against the config it varies.

    Raises:
        UserError: a key that is not a field of `base_config` (or is output_dir, which the grid
            owns), or values that are not a non-empty list without repeats.
    """
    if not isinstance(grid, Mapping) or not grid:
        raise UserError(f"a grid is a dict of field name -> list of values, got {grid!r}")
    fields = ({f.name for f in dataclasses.fields(base_config)}
              if dataclasses.is_dataclass(base_config) else None)
    checked = {}
    for key, values in grid.items():
        if fields is not None and key not in fields:
            raise UserError(f"grid key {key!r} is not a field of {type(base_config).__name__} "
                            f"(its fields: {', '.join(sorted(fields))})")
        if key == "output_dir":
            raise UserError("output_dir cannot be a grid key: the grid gives each combination "
                            "its folder inside output_dir")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise UserError(f"grid key {key!r}: expected a non-empty list of values, got "
                            f"{values!r}")
        values = list(values)
        repeated = [v for i, v in enumerate(values) if v in values[:i]]
        if repeated:
            raise UserError(f"grid key {key!r}: value {repeated[0]!r} is given twice")
        checked[key] = values
    return checked


def combinations(grid: Mapping[str, Sequence[Any]]) -> list[Combination]:
    """Every combination of the grid's values, the first key varying slowest.

    Example:
    >>> [c.name for c in combinations({"learning_rate": [2e-5, 5e-5], "train_batch_size": [32]})]
    ['1-lr2e-05', '2-lr5e-05']
    """
    keys = list(grid)
    varied = [k for k in keys if len(grid[k]) > 1]
    points = list(itertools.product(*(grid[k] for k in keys)))
    width = len(str(len(points)))
    result = []
    for i, point in enumerate(points, 1):
        values = dict(zip(keys, point, strict=True))
        parts = [f"{i:0{width}d}", *(SHORT_NAMES.get(k, f"{k}_") + _value_text(values[k])
                                     for k in varied)]
        result.append(Combination(i, values, re.sub(r"[^A-Za-z0-9._+-]", "_", "-".join(parts))))
    return result


def search(train_and_score: Callable[..., Mapping[str, Any]],
           grid: Mapping[str, Sequence[Any]], metric: str, higher_is_better: bool = True,
           seed: int | None = 12345) -> GridResult:
    """Calls `train_and_score(**values)` for each combination of the grid and picks the best.

    For a model.fit of one's own: the function builds, trains and scores a model for the values
    it is given and returns its dev scores.

    Args:
        train_and_score: callable(**values) -> dict with the dev `metric`; optionally "test"
            (the same metric on a test set), "best_epoch", "epochs" (shown in the table) and
            "model" (kept only while it is the best so far: `GridResult.best_model`).
        grid: dict. Argument name -> list of values.
        metric: str. The key of the returned dict to pick by.
        higher_is_better: bool. Whether a larger metric is better (False for a loss).
        seed: int or None. `keras.utils.set_random_seed(seed)` before every combination (the
            same seed for each, so a grid's scores repeat); None leaves the seeds alone.

    Returns:
        GridResult (`.best_row.values`, `.markdown()`, `.best_model`).

    Example:
    >>> result = search(lambda learning_rate: {"accuracy": 1 - abs(learning_rate - 3e-5)},
    ...                 {"learning_rate": [2e-5, 3e-5, 5e-5]}, metric="accuracy", seed=None)
    >>> result.best_row.values
    {'learning_rate': 3e-05}
    """
    grid = check_grid(None, grid)
    points = combinations(grid)
    rows: list[GridRow] = []
    best, best_model = 0, None
    for combination in points:
        if seed is not None:
            keras.utils.set_random_seed(seed)
        start = time.perf_counter()
        scores = dict(train_and_score(**combination.values))
        model = scores.pop("model", None)
        rows.append(GridRow(combination.index, combination.name, combination.values,
                            _metric(scores, metric, combination), _number(scores.get("test")),
                            scores.get("best_epoch"), scores.get("epochs"),
                            time.perf_counter() - start))
        if len(rows) == 1 or _better(rows[-1].dev, rows[best].dev, higher_is_better):
            best, best_model = len(rows) - 1, model
        del model  # a worse combination's model is dropped here
        logger.info("grid %d/%d %s: dev %s %.4f", combination.index, len(points),
                    combination.name, metric, rows[-1].dev)
    return GridResult(metric, higher_is_better, list(grid), rows, best, seed, best_model)


def run_grid(run_fn: Callable[[Any], dict[str, Any]], base_config: Any,
             grid: Mapping[str, Sequence[Any]], metric: str | None = None,
             higher_is_better: bool = True, task: str = "grid") -> dict[str, Any]:
    """Runs a task runner (run_classification, run_ner, run_qa) once per combination of the grid
    and leaves the best combination's run in base_config.output_dir (see the module docstring).

    Args:
        run_fn: callable(config) -> results dict, a task runner that writes its outputs to
            config.output_dir (`tfbert.training.finetune.task_run`) with results "dev",
            "test" and "train" ({"best_epoch", "history"}).
        base_config: a TaskConfig (e.g. ClassificationConfig). What every combination shares; its
            seed is every combination's.
        grid: dict. Config field -> list of values, e.g. {"learning_rate": [2e-5, 5e-5]}.
        metric: str or None. The dev metric to pick by; default the config's best_metric where
            it has one (classification), else "f1" (NER's entity F1, SQuAD's F1).
        higher_is_better: bool. Whether a larger metric is better.
        task: str. The task recorded in output_dir's manifest ("classification", "ner", "qa").

    Returns:
        The best combination's results with "grid" (`GridResult.to_json`) and the grid's
        "run_id", as output_dir/results.json holds them. A grid of one combination is a plain
        run: run_fn's results for those values.

    Raises:
        UserError: a bad grid (`check_grid`), a combination whose config is invalid (all are
            checked before any trains), one without do_train, or results without the dev
            metric.

    Example:
    >>> results = run_grid(run_classification, ClassificationConfig(  # doctest: +SKIP
    ...     output_dir="out/sentiment", task_name="sentiment", init_checkpoint="model/"),
    ...     {"learning_rate": [2e-5, 3e-5, 5e-5], "num_train_epochs": [3, 4]})
    """
    grid = check_grid(base_config, grid)
    points = combinations(grid)
    configs = [_replace(base_config, c) for c in points]  # every combination checked first
    if len(points) == 1:
        logger.info("a grid of one combination (%s): a plain run", _values_text(points[0].values))
        return run_fn(configs[0])
    untrained = [c.name for c, config in zip(points, configs, strict=True) if not config.do_train]
    if untrained:
        raise UserError(f"a grid trains every combination, and do_train is off ({untrained[0]})")
    metric = metric or getattr(base_config, "best_metric", None) or "f1"
    logger.info("grid search over %s: %d combinations, picked by dev %s", ", ".join(grid),
                len(points), metric)
    with ft.task_run(base_config, task) as run:
        grid_dir = run.path(GRID_DIR)
        rows: list[GridRow] = []
        best: int | None = None
        best_results: dict[str, Any] = {}
        for combination, config in zip(points, configs, strict=True):
            folder = os.path.join(grid_dir, combination.name)
            logger.info("grid %d/%d: %s (%s)", combination.index, len(points), combination.name,
                        _values_text(combination.values))
            start = time.perf_counter()
            results = run_fn(dataclasses.replace(config, output_dir=folder))
            row = _task_row(combination, results, metric, time.perf_counter() - start)
            rows.append(row)
            gc.collect()
            if best is None or _better(row.dev, rows[best].dev, higher_is_better):
                if best is not None:
                    _remove_model(os.path.join(grid_dir, rows[best].name))
                best, best_results = len(rows) - 1, results
            else:
                _remove_model(folder)
            logger.info("grid %d/%d %s: dev %s %.4f (best so far: %s)", row.index, len(points),
                        row.name, metric, row.dev, rows[best].name)
        result = GridResult(metric, higher_is_better, list(grid), rows, best,
                            getattr(base_config, "seed", None))
        table = result.markdown(folder=f"{GRID_DIR}/")
        _promote(os.path.join(grid_dir, result.best_row.name), run)
        summary = {**best_results, "run_id": run.run_id, "grid": result.to_json()}
        ft.write_results(run.directory, summary)
        with open(run.path(TABLE_FILE), "w", encoding="utf-8") as f:
            f.write(table)
        logger.info("grid search done:\n%s", table)
    return summary


def _replace(config: Any, combination: Combination) -> Any:
    try:
        return dataclasses.replace(config, **combination.values)
    except (TypeError, ValueError) as e:
        raise UserError(f"grid combination {combination.name} "
                        f"({_values_text(combination.values)}): {e}") from None


def _task_row(combination: Combination, results: dict[str, Any], metric: str,
              seconds: float) -> GridRow:
    train = results.get("train", {})
    return GridRow(combination.index, combination.name, combination.values,
                   _metric(results.get("dev") or {}, metric, combination, "dev "),
                   _number((results.get("test") or {}).get(metric)), train.get("best_epoch"),
                   len(train["history"]) if "history" in train else None, seconds,
                   results.get("run_id"))


def _promote(folder: str, run: outputs.Staging) -> None:
    """Moves the best combination's model/ into the grid's staging folder and copies its other
    outputs but results.json there (its folder keeps them, like every combination's)."""
    manifest = outputs.read_manifest(folder) or {}
    for name in manifest.get("outputs", []):
        source = os.path.join(folder, name)
        if name == "results.json" or not os.path.lexists(source):
            continue
        if name == "model":
            os.replace(source, run.path(name))
        elif os.path.isdir(source):
            shutil.copytree(source, run.path(name))
        else:
            shutil.copy2(source, run.path(name))


def _remove_model(folder: str) -> None:
    """Removes a combination's model/ (its run wrote it: its manifest lists it)."""
    manifest = outputs.read_manifest(folder) or {}
    path = os.path.join(folder, "model")
    if "model" in manifest.get("outputs", []) and os.path.isdir(path):
        shutil.rmtree(path)


def _metric(scores: Mapping[str, Any], metric: str, combination: Combination,
            where: str = "") -> float:
    if metric not in scores:
        raise UserError(f"grid combination {combination.name}: no {where}{metric!r} to compare "
                        f"(it gave {sorted(scores) or 'nothing'}); the grid picks by the dev "
                        "set's score, so it needs a dev set")
    value = _number(scores[metric])
    if value is None or math.isnan(value):
        raise UserError(f"grid combination {combination.name}: {where}{metric} is "
                        f"{scores[metric]!r}, not a number to compare")
    return value


def _number(value: Any) -> float | None:
    return (float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool)
            else None)


def _better(value: float, best: float, higher_is_better: bool) -> bool:
    return value > best if higher_is_better else value < best


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _values_text(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_value_text(v)}" for k, v in values.items())


def _score(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _text(value: Any) -> str:
    return "" if value is None else str(value)
