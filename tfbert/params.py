"""Parameter report: where a BERT's parameters live, computed from its config alone.

    python -m tfbert.params bert-base-chinese      # a preset
    python -m tfbert.params path/to/config.json    # tfbert, Google or Hugging Face config
    python -m tfbert.params                         # one line per preset

`count_parameters(config)` returns a flat dict: the summary keys `embeddings`, `encoder`,
`pooler`, `total` (BertModel with pooler, the number papers and model cards quote), plus
`per_layer`, `biases`, `total_without_biases`, `total_without_pooler`, the heads (`mlm_head`,
`nsp_head`, `pretrainer_total`) and one entry per component under its reference name
(`embeddings/word_embeddings`, `layer/attention/self/query`, ...), each also split into
`.../weight` (kernel, table or LayerNorm gamma) and `.../bias` (bias or LayerNorm beta).
`layer/...` entries count one transformer layer. The MLM decoder is tied to the word
embeddings, so it adds only `cls/predictions/output_bias`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys

from tfbert.config import PRESETS, BertConfig


@dataclasses.dataclass(frozen=True)
class _Part:
    """One weight group: a kernel/table/gamma of `shape` and a bias/beta of `bias` entries."""

    key: str
    shape: tuple[int, ...]
    bias: int

    @property
    def weight(self) -> int:
        return math.prod(self.shape) if self.shape else 0


def _groups(config: BertConfig) -> dict[str, list[_Part]]:
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    return {
        "embeddings": [
            _Part("embeddings/word_embeddings", (v, h), 0),
            _Part("embeddings/position_embeddings", (config.max_position_embeddings, h), 0),
            _Part("embeddings/token_type_embeddings", (config.type_vocab_size, h), 0),
            _Part("embeddings/LayerNorm", (h,), h),
        ],
        "per_layer": [
            _Part("layer/attention/self/query", (h, h), h),
            _Part("layer/attention/self/key", (h, h), h),
            _Part("layer/attention/self/value", (h, h), h),
            _Part("layer/attention/output/dense", (h, h), h),
            _Part("layer/attention/output/LayerNorm", (h,), h),
            _Part("layer/intermediate/dense", (h, i), i),
            _Part("layer/output/dense", (i, h), h),
            _Part("layer/output/LayerNorm", (h,), h),
        ],
        "pooler": [_Part("pooler/dense", (h, h), h)],
        "mlm_head": [
            _Part("cls/predictions/transform/dense", (h, h), h),
            _Part("cls/predictions/transform/LayerNorm", (h,), h),
            _Part("cls/predictions/output_bias", (), v),
        ],
        "nsp_head": [_Part("cls/seq_relationship", (h, 2), 2)],
    }


def _resolve(config: BertConfig | str) -> BertConfig:
    if isinstance(config, BertConfig):
        return config
    if isinstance(config, str):
        if config in PRESETS:
            return BertConfig.from_preset(config)
        if os.path.exists(config):
            return BertConfig.from_json_file(config)
        raise ValueError(f"{config!r} is neither a preset ({', '.join(sorted(PRESETS))}) "
                         "nor an existing config file")
    raise TypeError(f"count_parameters needs a BertConfig, preset name or config path, "
                    f"got {type(config).__name__}")


def count_parameters(config: BertConfig | str) -> dict[str, int]:
    """The parameter breakdown of a BERT model (see the module docstring for the keys).

    Args:
        config: BertConfig, preset name (e.g. "bert-base-chinese") or config file path.

    Example:
    >>> count_parameters("bert-base-chinese")["total"]
    102267648
    """
    config = _resolve(config)
    counts: dict[str, int] = {}
    sums: dict[str, int] = {}
    biases: dict[str, int] = {}
    for group, parts in _groups(config).items():
        for part in parts:
            counts[part.key] = part.weight + part.bias
            counts[part.key + "/weight"] = part.weight
            counts[part.key + "/bias"] = part.bias
        sums[group] = sum(p.weight + p.bias for p in parts)
        biases[group] = sum(p.bias for p in parts)
    layers = config.num_hidden_layers
    summary = {
        "embeddings": sums["embeddings"],
        "encoder": layers * sums["per_layer"],
        "per_layer": sums["per_layer"],
        "pooler": sums["pooler"],
    }
    summary["total"] = summary["embeddings"] + summary["encoder"] + summary["pooler"]
    summary["total_without_pooler"] = summary["total"] - summary["pooler"]
    summary["biases"] = biases["embeddings"] + layers * biases["per_layer"] + biases["pooler"]
    summary["total_without_biases"] = summary["total"] - summary["biases"]
    summary["mlm_head"] = sums["mlm_head"]
    summary["nsp_head"] = sums["nsp_head"]
    summary["pretrainer_total"] = summary["total"] + sums["mlm_head"] + sums["nsp_head"]
    return {**summary, **counts}


def format_table(config: BertConfig | str, title: str | None = None) -> str:
    """`count_parameters(config)` as a readable text table.

    Args:
        config: BertConfig, preset name or config file path.
        title: str. First line; defaults to the preset name or "BERT".
    """
    name = config if isinstance(config, str) else None
    config = _resolve(config)
    counts = count_parameters(config)
    total = counts["total"]
    c = config
    lines = [f"{title or name or 'BERT'}: L={c.num_hidden_layers} H={c.hidden_size} "
             f"N={c.num_attention_heads} I={c.intermediate_size} V={c.vocab_size} "
             f"P={c.max_position_embeddings} hidden_act={c.hidden_act}",
             f"{'component':<42}{'shape':>14}{'weights':>14}{'biases':>12}{'total':>14}"
             f"{'share':>8}"]
    rule = "-" * len(lines[-1])
    lines.append(rule)

    def row(label: str, count: int, shape: str = "", weight: str = "", bias: str = "",
            share: bool = True) -> None:
        pct = f"{100 * count / total:7.2f}%" if share else ""
        lines.append(f"{label:<42}{shape:>14}{weight:>14}{bias:>12}{count:>14,}{pct:>8}")

    groups = _groups(config)
    sections = [("embeddings", "embeddings", 1), ("per_layer", "encoder", c.num_hidden_layers),
                ("pooler", "pooler", 1)]
    for group, key, times in sections:
        label = f"{key} ({times} layers x {counts['per_layer']:,})" if times > 1 else key
        row(label, counts[key])
        for part in groups[group]:
            shape = "x".join(map(str, part.shape))
            row(f"  {part.key}", part.weight + part.bias, shape, f"{part.weight:,}",
                f"{part.bias:,}", share=times == 1)
    lines.append(rule)
    row("total (BertModel with pooler)", total)
    row("  without pooler", counts["total_without_pooler"])
    row("  biases and LayerNorm betas", counts["biases"])
    row("  without biases", counts["total_without_biases"])
    lines.append(rule)
    for group in ("mlm_head", "nsp_head"):
        row(f"{group} (pretraining)", counts[group], share=False)
        for part in groups[group]:
            shape = "x".join(map(str, part.shape)) if part.shape else ""
            row(f"  {part.key}", part.weight + part.bias, shape, f"{part.weight:,}",
                f"{part.bias:,}", share=False)
    row("pretrainer total (BertPretrainer, tied decoder)", counts["pretrainer_total"],
        share=False)
    return "\n".join(lines)


def _summary_table() -> str:
    lines = [f"{'preset':<30}{'L':>4}{'H':>6}{'V':>8}{'total':>16}{'pretrainer':>16}"]
    for name in PRESETS:
        c = BertConfig.from_preset(name)
        counts = count_parameters(c)
        lines.append(f"{name:<30}{c.num_hidden_layers:>4}{c.hidden_size:>6}{c.vocab_size:>8}"
                     f"{counts['total']:>16,}{counts['pretrainer_total']:>16,}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfbert.params", description="Parameter breakdown of a BERT config.")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="preset name or config file; none: one line per preset")
    args = parser.parse_args(argv)
    if not args.names:
        print(_summary_table())
        return 0
    try:
        tables = [format_table(name) for name in args.names]
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
