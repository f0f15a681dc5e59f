"""The simplest CUDA C++ kernel (topk_sigmoid_warp.cu: one warp per token, a REDUX and a ballot per round),
kept as a candidate to compare the packed-key kernel against."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import topk_sigmoid_cuda  # noqa: E402


def topk_sigmoid(logits, bias, k: int):
    return topk_sigmoid_cuda.run(logits, bias, k, "warp")
