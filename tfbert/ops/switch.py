"""The switch: which speed forms tfbert's layers run (`forms()`), and `use_forms(name)` to choose.

Shape of the decision: the default set follows the Keras backend and the device; `use_forms`
overrides it within a `with` block (the TFLite export traces under "stock"; tests pin each form
to "plain").
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Iterator

import keras


@dataclasses.dataclass(frozen=True)
class Forms:
    """One set of speed forms; each field switches one form of `tfbert.ops`.

    Args:
        name: str. The set's name (a key of FORM_SETS).
        matmul_2d: bool. Projections and feed-forward as one 2-D matmul with the bias as a
            BiasAdd op (`ops.linear`), which Grappler's oneDNN remapper fuses with the GELU.
        heads_first: bool. The attention core as batch matmuls in the [B, N, T, D] layout,
            entered and left by integer-bitcast axis swaps (`ops.attention`).
        fused_layer_norm: bool. Inference LayerNorm as one FusedBatchNormV3, which oneDNN
            rewrites into one kernel (`ops.layer_norm`; CPU only).
        dropout_16bit: bool. Dropout from 16 random bits per element (`ops.dropout`).
    """

    name: str
    matmul_2d: bool = False
    heads_first: bool = False
    fused_layer_norm: bool = False
    dropout_16bit: bool = False

    @property
    def tensorflow(self) -> bool:
        """Whether any form of the set needs TensorFlow."""
        return self.matmul_2d or self.heads_first or self.fused_layer_norm or self.dropout_16bit


FORM_SETS: dict[str, Forms] = {
    # keras.ops and Keras layers only: any backend (the reference every form is tested against)
    "plain": Forms("plain"),
    # TensorFlow on a CPU host: every form
    "tensorflow_cpu": Forms("tensorflow_cpu", matmul_2d=True, heads_first=True,
                            fused_layer_norm=True, dropout_16bit=True),
    # TensorFlow with a GPU: cuDNN's batch norm clamps epsilon to 1e-5, so no fused LayerNorm
    "tensorflow_gpu": Forms("tensorflow_gpu", matmul_2d=True, heads_first=True,
                            dropout_16bit=True),
    # TensorFlow for the TFLite converter: it decomposes the fused LayerNorm into more ops than
    # keras's and has no use for the bitcast swaps
    "stock": Forms("stock", matmul_2d=True, dropout_16bit=True),
}

_CHOSEN: contextvars.ContextVar[Forms | None] = contextvars.ContextVar("tfbert_forms",
                                                                       default=None)


@functools.cache
def has_gpu() -> bool:
    """Whether TensorFlow sees a GPU.

    Example:
    >>> isinstance(has_gpu(), bool)
    True
    """
    import tensorflow as tf  # TensorFlow forms only: tfbert.ops imports under any Keras backend

    return bool(tf.config.list_logical_devices("GPU"))


def default_forms() -> Forms:
    """The set for this process: "plain" off TensorFlow, else "tensorflow_cpu" or "_gpu"."""
    if keras.backend.backend() != "tensorflow":
        return FORM_SETS["plain"]
    return FORM_SETS["tensorflow_gpu" if has_gpu() else "tensorflow_cpu"]


def forms() -> Forms:
    """The active set: the innermost `use_forms` block's, else `default_forms()`.

    Example:
    >>> forms() == default_forms()
    True
    >>> with use_forms("plain"):
    ...     forms().heads_first
    False
    """
    chosen = _CHOSEN.get()
    return default_forms() if chosen is None else chosen


@contextlib.contextmanager
def use_forms(name: str | Forms) -> Iterator[Forms]:
    """Within the block, tfbert's layers run (and trace) the form set `name`.

    Args:
        name: str or Forms. A FORM_SETS name: "plain", "stock", "tensorflow_cpu" or
            "tensorflow_gpu" (the last three need the TensorFlow backend); or a Forms, e.g.
            `dataclasses.replace(forms(), heads_first=False)` for an A/B of one form.

    Example:
    >>> with use_forms("stock") as chosen:
    ...     chosen.matmul_2d, chosen.heads_first
    (True, False)
    """
    if not isinstance(name, Forms) and name not in FORM_SETS:
        raise ValueError(f"unknown form set {name!r}; expected one of {sorted(FORM_SETS)}")
    chosen = name if isinstance(name, Forms) else FORM_SETS[name]
    if chosen.tensorflow and keras.backend.backend() != "tensorflow":
        raise ValueError(f"form set {chosen.name!r} needs the TensorFlow backend, "
                         f"not {keras.backend.backend()!r}")
    token = _CHOSEN.set(chosen)
    try:
        yield chosen
    finally:
        _CHOSEN.reset(token)
