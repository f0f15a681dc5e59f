"""The packed-key CUDA C++ kernel (topk_sigmoid_keys.cu) on a persistent grid: at most BLOCKS_PER_SM blocks per
SM, each warp taking token after token with the next row loaded ahead (topk_sigmoid_cuda.py, "keys_persistent").
BLOCKS_PER_SM is a launch setting (no rebuild), declared as a tuning space for `kpilot optimize --strategy
search`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import topk_sigmoid_cuda  # noqa: E402

BLOCKS_PER_SM = 12
KPILOT_TUNE = {"BLOCKS_PER_SM": [2, 4, 6, 8, 12]}


def topk_sigmoid(logits, bias, k: int):
    return topk_sigmoid_cuda.run(logits, bias, k, "keys_persistent", BLOCKS_PER_SM)
