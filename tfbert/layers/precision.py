"""Mixed precision: which parts of BERT keep float32 under a mixed dtype policy.

Under `mixed_bfloat16` / `mixed_float16` the matmuls run in the half type, while the residual
stream, LayerNorm, the attention softmax and the loss-facing logits stay in float32 (the
recipe of tensorflow/models' BERT). Layers ask `float32_policy(policy)` for the dtype of those
parts. A pure half policy (`bfloat16`: half-precision variables, which is what a bfloat16
serving export uses to halve the weights' memory traffic) keeps those parts float32 as well:
only the matmul kernels and activations are half precision.
"""

from __future__ import annotations

from typing import Any

import keras


def resolve_policy(dtype: Any = None) -> keras.DTypePolicy:
    """The dtype policy a layer built with `dtype` gets (None: the global policy)."""
    if dtype is None:
        return keras.config.dtype_policy()
    return keras.dtype_policies.get(dtype)


def float32_policy(dtype: Any = None) -> Any:
    """"float32" for float32, mixed and half-precision policies; other policies (float64)
    unchanged.

    Args:
        dtype: str, DTypePolicy or None. The policy of the surrounding layer (None: global).
    """
    policy = resolve_policy(dtype)
    if policy.variable_dtype == "float32" or policy.compute_dtype in ("bfloat16", "float16"):
        return "float32"
    return policy
