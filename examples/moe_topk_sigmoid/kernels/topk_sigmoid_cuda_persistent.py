"""The packed-key CUDA C++ kernel (topk_sigmoid_keys.cu) on a persistent grid: at most 16 blocks per SM,
each warp taking token after token with the next row loaded ahead (topk_sigmoid_cuda.py, "keys_persistent")."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import topk_sigmoid_cuda  # noqa: E402


def topk_sigmoid(logits, bias, k: int):
    return topk_sigmoid_cuda.run(logits, bias, k, "keys_persistent")
