"""TensorFlow's devices, found once at a command's start, without a line that says nothing.

A TensorFlow built with CUDA (the pip wheel) calls cuInit the first time it lists its devices.
On a machine without an NVIDIA driver that call fails, and TensorFlow's C++ runtime logs, at
ERROR level, "failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR
(303)": TF_CPP_MIN_LOG_LEVEL=2 keeps it (3 would hide every real error too) and
CUDA_VISIBLE_DEVICES="" does not prevent it (cuInit runs before the visible devices are read;
checked with TensorFlow 2.21.0). On such a machine it only means "no GPU", which TensorFlow's
import already says ("Could not find cuda drivers on your machine, GPU will not be used").

`list_devices()` is what the commands that run TensorFlow ops call after parsing their flags,
before any work (the absl-flag commands through `common_flags.run`, create_pretraining_data,
tfbert.export; build_vocab runs none): it lists the devices once (TensorFlow keeps the result;
the runtime itself is not started, so a strategy may still be set up after it) and, only where
no NVIDIA driver is installed, leaves out that one line. With a driver every line shows: a
failed cuInit there is a real error.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
from collections.abc import Iterator

CUINIT_FAILURE = b"failed call to cuInit"


def list_devices() -> list:
    """TensorFlow's physical devices, listed now; without the cuInit line where no NVIDIA
    driver is installed (the module docstring says why)."""
    import tensorflow as tf

    if has_nvidia_driver():
        return tf.config.list_physical_devices()
    with _stderr_without(CUINIT_FAILURE):
        return tf.config.list_physical_devices()


def has_nvidia_driver() -> bool:
    """Whether an NVIDIA driver is installed: its kernel module (/proc/driver/nvidia) or a
    loadable libcuda.so.1 (WSL2 and some containers have only the library)."""
    if os.path.exists("/proc/driver/nvidia"):
        return True
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _stderr_without(marker: bytes) -> Iterator[None]:
    """Holds file descriptor 2 (where TensorFlow's C++ runtime logs) in a temporary file for
    the block, then writes its lines back, in order, except those holding `marker`."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to hold
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = b"".join(line for line in held if marker not in line)
            while kept:
                kept = kept[os.write(2, kept):]
