from setuptools import find_packages, setup

setup(
    name="tfbert",
    version="0.1.0",
    description="BERT for TensorFlow 2 / Keras 3: vocab, pretraining data, pretraining, "
                "fine-tuning, SavedModel and TFLite export",
    packages=find_packages(include=["tfbert", "tfbert.*"]),
    # Tables read with importlib.resources (op registries of TF Serving releases, the
    # tokenizer's Unicode classes), written by the scripts in data_tools/.
    package_data={"tfbert.export": ["data/*.txt"], "tfbert.text": ["data/*.txt"]},
    python_requires=">=3.10,<3.13",
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "tensorflow-text>=2.21,<2.22",
        "keras>=3.15,<4",
        "keras-hub>=0.32,<0.40",
        "tensorflow-datasets>=4.9,<5",
        "safetensors>=0.4,<1",
        "numpy>=1.26,<3",
        "absl-py>=2,<3",
        "tqdm>=4.66,<5",
        "jieba>=0.42,<0.43",
        "snownlp>=0.12,<0.13",
    ],
    extras_require={
        "test": ["pytest>=8,<10", "ruff>=0.6", "tokenizers>=0.20,<1", "scikit-learn>=1.4,<2",
                 "tensorflow-serving-api>=2.21,<2.22"],
        "bench": ["matplotlib>=3.8,<4", "onnx>=1.16", "onnxscript>=0.5", "onnxruntime>=1.18"],
        "jax": ["jax>=0.4.30"],
    },
)
