"""sentence-transformers directories: a BERT checkpoint plus modules.json and its modules.

    modules.json                  the pipeline: Transformer -> Pooling -> [Dense] -> [Normalize]
    config.json, model.safetensors, vocab.txt, tokenizer_config.json
                                  the BERT (Hugging Face layout) at the Transformer's path
                                  ("" for the root, or a folder such as 0_Transformer)
    sentence_bert_config.json     beside the BERT: max_seq_length, do_lower_case
    1_Pooling/config.json         the pooling mode
    2_Dense/config.json           in_features, out_features, bias, activation_function
    2_Dense/model.safetensors     linear.weight [out, in], linear.bias [out] (or pytorch_model.bin)
    2_Normalize/ (3_ with Dense)  L2 normalisation (no weights)
    config_sentence_transformers.json  prompts and the similarity function

A directory is read like a fine-tuned head (`heads.from_hf`): the Dense module's weights become
`head.projection.kernel` [in, out] (Keras layout) and `head.projection.bias`, and the pipeline
tfbert.json-like entries for `tfbert.models.sentence_encoder.BertSentenceEncoder`: model_class,
task "embedding", model_config (pooling, projection_size, projection_activation, normalize),
max_seq_length and lower_case. `tfbert.checkpoints.hf.read_hf` asks this module when a
directory has modules.json; the writer puts these files beside the "hf" writer's BERT.

Module types are matched by class name (`sentence_transformers.models.Pooling` in releases
before 5, `sentence_transformers.sentence_transformer.modules.pooling.Pooling` in 6, ...).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

import numpy as np
from safetensors.numpy import save

from tfbert.checkpoints.canonical import CheckpointError, as_float32, read_config_object
from tfbert.checkpoints.names import HEAD_PREFIX
from tfbert.config import BertConfig
from tfbert.fileio import atomic_write, write_json

logger = logging.getLogger(__name__)

MODULES_FILE = "modules.json"
CONFIG_FILE = "sentence_bert_config.json"
MODEL_CLASS = "BertSentenceEncoder"
TASK = "embedding"
LAYER = "projection"  # the Keras name of BertSentenceEncoder's Dense layer
KERNEL, BIAS = f"{HEAD_PREFIX}{LAYER}.kernel", f"{HEAD_PREFIX}{LAYER}.bias"
DENSE_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# The module types tfbert writes: every release of sentence-transformers reads these names.
TYPES = {"Transformer": "sentence_transformers.models.Transformer",
         "Pooling": "sentence_transformers.models.Pooling",
         "Dense": "sentence_transformers.models.Dense",
         "Normalize": "sentence_transformers.models.Normalize"}
# sentence-transformers' pooling modes (its `pooling_mode` names, and the boolean keys of its
# config.json before release 6, in the order it concatenates them) -> BertSentenceEncoder's.
POOLING_NAMES = {"cls": "cls", "max": "max", "mean": "mean",
                 "mean_sqrt_len_tokens": "mean_sqrt_len"}
LEGACY_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                       "pooling_mode_mean_tokens": "mean",
                       "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                       "pooling_mode_weightedmean_tokens": "weightedmean",
                       "pooling_mode_lasttoken": "lasttoken"}
# torch activation classes (Dense's activation_function, as `fullname` writes it) -> tfbert's.
ACTIVATIONS = {"torch.nn.modules.activation.Tanh": "tanh", "torch.nn.Tanh": "tanh",
               "torch.nn.modules.linear.Identity": "identity", "torch.nn.Identity": "identity"}
_WRITTEN_ACTIVATIONS = {"tanh": "torch.nn.modules.activation.Tanh",
                        "identity": "torch.nn.modules.linear.Identity"}
_EMBEDDING = "sentence_embedding"  # the feature Dense and Normalize read and write


def is_st_dir(path: str) -> bool:
    """Whether `path` is a directory with a modules.json."""
    return os.path.isfile(os.path.join(path, MODULES_FILE))


@dataclasses.dataclass(frozen=True)
class Modules:
    """The pipeline of a sentence-transformers directory, as modules.json and the modules'
    config files give it.

    Args:
        path: str. The directory.
        transformer_dir: str. Where the BERT checkpoint is.
        pooling: str. BertSentenceEncoder's pooling mode.
        pooling_dimension: int or None. The Pooling module's embedding dimension (H).
        dense_dir: str or None. The Dense module's folder; None without one.
        projection_size: int or None. Dense's out_features.
        projection_in: int or None. Dense's in_features.
        projection_activation: str. "tanh" or "identity".
        normalize: bool. A Normalize module ends the pipeline.
        max_seq_length: int or None. sentence_bert_config.json's max_seq_length.
        model_max_length: int or None. tokenizer_config.json's model_max_length (the length
            sentence-transformers truncates at when sentence_bert_config.json gives none).
        do_lower_case: bool. sentence_bert_config.json's do_lower_case.
    """

    path: str
    transformer_dir: str
    pooling: str
    pooling_dimension: int | None = None
    dense_dir: str | None = None
    projection_size: int | None = None
    projection_in: int | None = None
    projection_activation: str = "tanh"
    normalize: bool = False
    max_seq_length: int | None = None
    model_max_length: int | None = None
    do_lower_case: bool = False

    def model_config(self) -> dict[str, Any]:
        """BertSentenceEncoder's head arguments."""
        return {"pooling": self.pooling, "projection_size": self.projection_size,
                "projection_activation": self.projection_activation,
                "normalize": self.normalize}

    def dense_file(self) -> str:
        """The Dense module's weight file: model.safetensors, else pytorch_model.bin."""
        assert self.dense_dir is not None
        for name in DENSE_WEIGHT_FILES:
            candidate = os.path.join(self.dense_dir, name)
            if os.path.isfile(candidate):
                return candidate
        raise CheckpointError(f"{self.dense_dir}: the Dense module of {self._modules_file} has "
                              f"no weights; expected {' or '.join(DENSE_WEIGHT_FILES)}")

    def head_weights(self, state: dict[str, Any], source: str) -> dict[str, np.ndarray]:
        """The Dense module's state dict (linear.weight [out, in], linear.bias [out]) as
        BertSentenceEncoder's `head.projection.kernel` [in, out] and `head.projection.bias`."""
        extra = sorted(set(state) - {"linear.weight", "linear.bias"})
        if "linear.weight" not in state or "linear.bias" not in state or extra:
            raise CheckpointError(f"{source}: expected a Dense module's linear.weight and "
                                  f"linear.bias, found {sorted(state)}")
        weight = as_float32("linear.weight", state["linear.weight"], source)
        bias = as_float32("linear.bias", state["linear.bias"], source)
        if weight.shape != (self.projection_size, self.projection_in) or bias.shape != (
                self.projection_size,):
            raise CheckpointError(
                f"{source}: linear.weight {tuple(weight.shape)} and linear.bias "
                f"{tuple(bias.shape)} do not fit the module's config.json (out_features "
                f"{self.projection_size}, in_features {self.projection_in})")
        return {KERNEL: np.ascontiguousarray(weight.T), BIAS: bias}

    def metadata(self, config: BertConfig) -> dict[str, Any]:
        """tfbert.json-like entries of the pipeline on a BERT of `config` (`config.lower_case`:
        the casing of the BERT's own tokenizer).

        Raises:
            CheckpointError: a pooling or projection size that is not the BERT's hidden size.
        """
        hidden = config.hidden_size
        if self.pooling_dimension is not None and self.pooling_dimension != hidden:
            raise CheckpointError(f"{self.path}: its Pooling module pools {self.pooling_dimension}"
                                  f" values per token; the BERT's hidden_size is {hidden}")
        if self.projection_in is not None and self.projection_in != hidden:
            raise CheckpointError(f"{self.dense_dir}: the Dense module takes in_features "
                                  f"{self.projection_in}; the pooled vector has {hidden}")
        return {"model_class": MODEL_CLASS, "task": TASK, "model_config": self.model_config(),
                "max_seq_length": self.sequence_length(config),
                "lower_case": self.lower_case(config.lower_case)}

    def sequence_length(self, config: BertConfig) -> int:
        """The length sentence-transformers truncates texts to: max_seq_length, else the
        tokenizer's model_max_length capped at max_position_embeddings (its Transformer module's
        rule); never past max_position_embeddings, which the model cannot read beyond."""
        positions = config.max_position_embeddings
        length = self.max_seq_length or min(self.model_max_length or positions, positions)
        if length > positions:
            logger.warning("%s: max_seq_length %d is more than the BERT's "
                           "max_position_embeddings %d; using %d", self.path, length, positions,
                           positions)
        return min(length, positions)

    def lower_case(self, tokenizer_lower_case: bool) -> bool:
        """The casing sentence-transformers tokenizes with. Its Transformer module's
        do_lower_case only adds lower-casing: releases before 6 lower-case the text before the
        Hugging Face tokenizer, release 6 puts a Lowercase normalizer in front of it. The
        tokenizer itself still lower-cases (and strips accents) when tokenizer_config.json says
        do_lower_case, as all-MiniLM-L6-v2's does under sentence_bert_config.json's
        do_lower_case false. So the text is lower-cased when either says so."""
        if self.do_lower_case and not tokenizer_lower_case:
            logger.warning("%s: sentence_bert_config.json lower-cases texts for a cased tokenizer,"
                           " which keeps accents; tfbert's lower_case also strips them, so texts"
                           " with accents get other ids than in sentence-transformers", self.path)
        return bool(tokenizer_lower_case or self.do_lower_case)

    @property
    def _modules_file(self) -> str:
        return os.path.join(self.path, MODULES_FILE)


# --- reading --------------------------------------------------------------------------------


def _class_name(entry: Any, modules_file: str) -> tuple[str, str]:
    """(class name, folder) of a modules.json entry; its type must be a sentence-transformers
    module tfbert runs."""
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        raise CheckpointError(f"{modules_file}: each module needs a \"type\", got {entry!r}")
    module_type = entry["type"]
    name = module_type.rsplit(".", 1)[-1]
    if not module_type.startswith("sentence_transformers.") or name not in TYPES:
        raise CheckpointError(f"{modules_file}: module type {module_type!r} is not one tfbert "
                              f"runs; it reads {' -> '.join(TYPES)} (Dense and Normalize "
                              "optional)")
    return name, str(entry.get("path") or "")


def read_modules(path: str) -> Modules:
    """modules.json of `path` and its modules' config files.

    Raises:
        CheckpointError: naming the file: a module type other than Transformer, Pooling, Dense
            and Normalize, another order, a pooling or activation BertSentenceEncoder does not
            have, several pooling modes, or a Transformer folder without a BERT.
    """
    modules_file = os.path.join(path, MODULES_FILE)
    with open(modules_file, encoding="utf-8") as f:
        try:
            entries = json.load(f)
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{modules_file}: not valid JSON ({e})") from None
    if not isinstance(entries, list):
        raise CheckpointError(f"{modules_file}: expected a JSON list of modules")
    found = [_class_name(entry, modules_file) for entry in entries]
    names = [name for name, _ in found]
    order = ["Transformer", "Pooling", *(n for n in ("Dense", "Normalize") if n in names)]
    if names != order:
        raise CheckpointError(f"{modules_file}: modules {' -> '.join(names) or 'none'}; tfbert "
                              "reads Transformer -> Pooling -> [Dense] -> [Normalize], each at "
                              "most once")
    folders = {name: os.path.join(path, folder) for name, folder in found}
    transformer_dir = os.path.normpath(folders["Transformer"])
    if not os.path.isfile(os.path.join(transformer_dir, "config.json")):
        raise CheckpointError(f"{modules_file}: its Transformer module's folder "
                              f"{transformer_dir} has no config.json (the BERT checkpoint)")
    values: dict[str, Any] = {"path": path, "transformer_dir": transformer_dir,
                              "normalize": "Normalize" in names}
    values.update(_transformer_values(transformer_dir))
    values.update(_pooling_values(folders["Pooling"]))
    if "Dense" in names:
        values.update(_dense_values(folders["Dense"]))
    if "Normalize" in names:
        _check_feature(os.path.join(folders["Normalize"], "config.json"))
    _warn_on_prompt(path)
    return Modules(**values)


def _read_object(config_file: str) -> dict[str, Any]:
    return read_config_object(config_file) if os.path.isfile(config_file) else {}


def _transformer_values(transformer_dir: str) -> dict[str, Any]:
    config_file = os.path.join(transformer_dir, CONFIG_FILE)
    values = _read_object(config_file)
    task = values.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise CheckpointError(f"{config_file}: transformer_task {task!r}; tfbert reads the "
                              "Transformer module's hidden states (\"feature-extraction\")")
    tokenizer = _read_object(os.path.join(transformer_dir, "tokenizer_config.json"))
    model_max_length = tokenizer.get("model_max_length")
    return {"max_seq_length": _length(values.get("max_seq_length"), config_file),
            "model_max_length": (model_max_length if isinstance(model_max_length, int)
                                 and not isinstance(model_max_length, bool) else None),
            "do_lower_case": bool(values.get("do_lower_case", False))}


def _length(value: Any, source: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise CheckpointError(f"{source}: max_seq_length must be an int of at least 2, "
                              f"got {value!r}")
    return value


def _pooling_values(folder: str) -> dict[str, Any]:
    """The one pooling mode of a Pooling module's config.json: `pooling_mode` (a name or a
    list), else the boolean pooling_mode_* keys; none at all is "mean" (sentence-transformers'
    default)."""
    config_file = os.path.join(folder, "config.json")
    values = _read_object(config_file)
    if "pooling_mode" in values:
        mode = values["pooling_mode"]
        modes = list(mode) if isinstance(mode, (list, tuple)) else [mode]
    else:
        modes = [m for key, m in LEGACY_POOLING_KEYS.items() if values.get(key)] or ["mean"]
    if len(modes) != 1:
        raise CheckpointError(f"{config_file}: pooling modes {modes} concatenate several "
                              "vectors; BertSentenceEncoder pools with one mode")
    if modes[0] not in POOLING_NAMES:
        raise CheckpointError(f"{config_file}: pooling mode {modes[0]!r} is not one "
                              f"BertSentenceEncoder has ({', '.join(POOLING_NAMES)})")
    dimension = values.get("embedding_dimension", values.get("word_embedding_dimension"))
    return {"pooling": POOLING_NAMES[modes[0]],
            "pooling_dimension": dimension if isinstance(dimension, int) else None}


def _dense_values(folder: str) -> dict[str, Any]:
    config_file = os.path.join(folder, "config.json")
    values = _read_object(config_file)
    if not os.path.isfile(config_file):
        raise CheckpointError(f"{folder}: a Dense module needs its config.json")
    sizes = [values.get("in_features"), values.get("out_features")]
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        raise CheckpointError(f"{config_file}: in_features and out_features must be positive "
                              f"ints, got {sizes}")
    activation = values.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation not in ACTIVATIONS:
        raise CheckpointError(f"{config_file}: activation_function {activation!r}; "
                              "BertSentenceEncoder's projection has Tanh or Identity")
    if not values.get("bias", True) or values.get("use_residual", False):
        raise CheckpointError(f"{config_file}: a Dense module without bias or with use_residual;"
                              " BertSentenceEncoder's projection is activation(x W + b)")
    _check_feature(config_file, values)
    return {"dense_dir": folder, "projection_in": sizes[0], "projection_size": sizes[1],
            "projection_activation": ACTIVATIONS[activation]}


def _check_feature(config_file: str, values: dict[str, Any] | None = None) -> None:
    """Dense and Normalize must work on the pooled vector (their default feature)."""
    values = _read_object(config_file) if values is None else values
    for key in ("module_input_name", "module_output_name"):
        if values.get(key, _EMBEDDING) not in (_EMBEDDING, None):
            raise CheckpointError(f"{config_file}: {key} {values[key]!r}; tfbert runs the module"
                                  f" on the pooled vector ({_EMBEDDING!r})")


def _warn_on_prompt(path: str) -> None:
    values = _read_object(os.path.join(path, "config_sentence_transformers.json"))
    name = values.get("default_prompt_name")
    if name:
        prompt = (values.get("prompts") or {}).get(name)
        logger.warning("%s: sentence-transformers puts the prompt %r before every text by "
                       "default; tfbert does not: add it to the texts yourself", path, prompt)


# --- writing --------------------------------------------------------------------------------


def write_modules(directory: str, model_info: dict[str, Any] | None,
                  head: dict[str, np.ndarray], hidden_size: int, max_seq_length: int | None,
                  source: str) -> None:
    """Writes modules.json and the modules beside the BERT the "hf" writer puts in `directory`.

    Folders are numbered by the module's place, as sentence-transformers names them (1_Pooling,
    2_Dense, then 2_Normalize or 3_Normalize). sentence_bert_config.json's do_lower_case is
    false: the tokenizer's own casing (tokenizer_config.json) decides.

    Args:
        directory: str. The directory the BERT is written to.
        model_info: dict or None. tfbert.json's model entries; a BertSentenceEncoder's.
        head: dict. Its `head.*` weights (the projection's, when it has one).
        hidden_size: int. H of the BERT.
        max_seq_length: int or None. The length sentence-transformers truncates to (None: the
            BERT's max_position_embeddings).
        source: str. For error messages.
    """
    model_config = check_writable(model_info, head, source)
    modules = [("Transformer", "")]
    modules.append(("Pooling", "1_Pooling"))
    if model_config.get("projection_size") is not None:
        modules.append(("Dense", f"{len(modules)}_Dense"))
    if model_config.get("normalize", True):
        modules.append(("Normalize", f"{len(modules)}_Normalize"))
    write_json(os.path.join(directory, MODULES_FILE),
               [{"idx": i, "name": str(i), "path": folder, "type": TYPES[name]}
                for i, (name, folder) in enumerate(modules)])
    write_json(os.path.join(directory, CONFIG_FILE),
               {"max_seq_length": max_seq_length, "do_lower_case": False})
    pooling = model_config.get("pooling", "mean")
    st_mode = next(k for k, v in POOLING_NAMES.items() if v == pooling)
    write_json(os.path.join(directory, "1_Pooling", "config.json"),
               {"word_embedding_dimension": hidden_size,
                **{key: mode == st_mode for key, mode in LEGACY_POOLING_KEYS.items()}})
    for name, folder in modules:
        if name == "Dense":
            kernel, bias = head[KERNEL], head[BIAS]
            write_json(os.path.join(directory, folder, "config.json"),
                       {"in_features": int(kernel.shape[0]), "out_features": int(kernel.shape[1]),
                        "bias": True, "activation_function": _WRITTEN_ACTIVATIONS[
                            model_config.get("projection_activation", "tanh")]})
            state = {"linear.weight": np.ascontiguousarray(kernel.T, dtype=np.float32),
                     "linear.bias": np.ascontiguousarray(bias, dtype=np.float32)}
            with atomic_write(os.path.join(directory, folder, "model.safetensors"), "wb") as f:
                f.write(save(state, metadata={"format": "pt"}))
        elif name == "Normalize":
            os.makedirs(os.path.join(directory, folder), exist_ok=True)  # no config, no weights
    write_json(os.path.join(directory, "config_sentence_transformers.json"),
               {"model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None,
                "similarity_fn_name": "cosine"})


def check_writable(model_info: dict[str, Any] | None, head: dict[str, np.ndarray],
                   source: str) -> dict[str, Any]:
    """The head config of a BertSentenceEncoder whose weights `head` are; CheckpointError for
    anything else (before a file is written)."""
    model_class = (model_info or {}).get("model_class")
    if model_class != MODEL_CLASS:
        raise CheckpointError(f"{source}: format 'sentence-transformers' holds a "
                              f"{MODEL_CLASS} (pooling, projection, normalisation), not a "
                              f"{model_class or 'model of unknown class'}; wrap the encoder in "
                              "tfbert.models.sentence_encoder.BertSentenceEncoder")
    model_config = dict((model_info or {}).get("model_config") or {})
    expected = {KERNEL, BIAS} if model_config.get("projection_size") is not None else set()
    if set(head) != expected:
        raise CheckpointError(f"{source}: {MODEL_CLASS} weights {sorted(head)}; format "
                              f"'sentence-transformers' holds {sorted(expected) or 'none'}")
    return model_config
