"""Activations by BertConfig.hidden_act name, written with keras.ops (any backend).

Names follow tfbert's config: "gelu" is the exact erf form (Hugging Face's "gelu"), "gelu_tanh"
the tanh approximation that Google's BERT code calls "gelu".
"""

from __future__ import annotations

from collections.abc import Callable

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tfbert")
def gelu(x):
    """GELU, exact: x * Phi(x) with the normal CDF via erf."""
    return ops.gelu(x, approximate=False)


@keras.saving.register_keras_serializable(package="tfbert")
def gelu_tanh(x):
    """GELU, tanh approximation (Google BERT's `gelu`)."""
    return ops.gelu(x, approximate=True)


ACTIVATION_FUNCTIONS: dict[str, Callable] = {
    "gelu": gelu,
    "gelu_tanh": gelu_tanh,
    "relu": keras.activations.relu,
    "silu": keras.activations.silu,
    "tanh": keras.activations.tanh,
}


def get_activation(name: str) -> Callable:
    """The activation function for a BertConfig.hidden_act name.

    Args:
        name: str. One of "gelu", "gelu_tanh", "relu", "silu", "tanh".

    Example:
    >>> tuple(get_activation("gelu_tanh")(keras.ops.ones((2,))).shape)
    (2,)
    """
    if name not in ACTIVATION_FUNCTIONS:
        raise ValueError(
            f"unknown activation {name!r}; expected one of {sorted(ACTIVATION_FUNCTIONS)}")
    return ACTIVATION_FUNCTIONS[name]
