"""Look inside a model: layer-wise linear probes and attention statistics.

    python -m tfbert.probe --model=tfbert-chinese --output_dir=output/probe \\
        [--attention="中国人民银行今天宣布降低利率。"]

For every layer (index 0: the embeddings' output, then each transformer layer) one linear probe
per task is trained on frozen features of probe-train and scored on probe-test: word
segmentation (lexical), part of speech (syntactic), entity type and review sentiment
(semantic), on People's Daily and review sentences that no built-in pretraining corpus holds.
Two controls say what a score means: the same probes on a random-init model of the same shape,
and Hewitt & Liang's control task (a fixed random label per character). Attention: Clark et
al.'s per-head statistics over the probe sentences, and one sentence's maps per layer.

Modules: `tasks` (the probe data and control labels), `features` (model loading, one forward
pass per batch for every layer), `probes` (logistic regression, scores, Tenney's expected
layer), `attention` (per-head statistics, a font that shows Chinese), `plots`, `report`
(probe.json entries, probe.md), `pipeline` (`run`). TensorFlow loads inside the functions, so
`import tfbert.probe` (and `--help`) stays cheap.
"""

from tfbert.probe.pipeline import run

__all__ = ["run"]
