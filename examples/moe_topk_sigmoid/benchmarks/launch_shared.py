"""What static shared memory adds to a short kernel's time, timed as `kpilot bench` times a candidate (L2 flushed,
the GPU kept busy while the host launches, CUDA events around the call; median of 200, rounds interleaved):
kernels that do nothing but hold 0, 2, 8, 36 or 48 KB of shared memory a block, and the 2 KB one again with
each preferred carveout (cudaFuncAttributePreferredSharedMemoryCarveout: 0, the most L1; 100, the most shared
memory), on the grid of the MoE kernels at 8,192 tokens (256 blocks of 128 threads) and on one block.
Writes examples/moe_topk_sigmoid/results/launch_shared.json.

    python examples/moe_topk_sigmoid/benchmarks/launch_shared.py [--rounds 3] [--calls 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(MOE), str(ROOT / "benchmarks")]

from _common import environment  # noqa: E402

# name -> (static shared memory in bytes a block, preferred carveout or -1 for the driver's choice)
KERNELS = {"none": (0, -1), "2k": (2048, -1), "8k": (8192, -1), "36k": (36864, -1), "48k": (49152, -1),
           "2k_carveout0": (2048, 0), "2k_carveout100": (2048, 100), "none_carveout100": (0, 100)}
NAMES = tuple(KERNELS)
DECLARATION = "void launch(std::string name, torch::Tensor p, int64_t blocks);"
SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

// A kernel holding BYTES of static shared memory (none for 0) that writes nothing unless n < 0; ID makes a
// function of its own for each preferred carveout.
template <int BYTES, int ID>
__global__ void hold(int* p, int n) {
  if constexpr (BYTES > 0) {
    __shared__ int s[BYTES / 4];
    if (n < 0) {
      s[threadIdx.x % (BYTES / 4)] = n;
      __syncthreads();
      p[threadIdx.x] = s[(threadIdx.x + 1) % (BYTES / 4)];
    }
  } else {
    if (n < 0) p[threadIdx.x] = n;
  }
}

template <int BYTES, int ID>
void run(torch::Tensor p, int64_t blocks, int carveout) {
  static bool set = false;
  if (!set && carveout >= 0) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(hold<BYTES, ID>, cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
    set = true;
  }
  hold<BYTES, ID><<<(int)blocks, 128, 0, c10::cuda::getCurrentCUDAStream()>>>(p.data_ptr<int>(), 1);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void launch(std::string name, torch::Tensor p, int64_t blocks) {
""" + "".join(f'  if (name == "{name}") return run<{size}, {i}>(p, blocks, {carveout});\n'
              for i, (name, (size, carveout)) in enumerate(KERNELS.items())) + r"""  TORCH_CHECK(false, "no kernel ", name);
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    import torch
    from torch.utils.cpp_extension import load_inline

    if not torch.cuda.is_available():
        sys.exit("launch_shared.py needs a GPU")
    from moe_large import round_orders
    from stream_floor import flushed_median_us

    module = load_inline("kpilot_launch_shared", cpp_sources=DECLARATION, cuda_sources=SOURCE, functions=["launch"],
                         extra_cuda_cflags=["-O3"])
    p = torch.zeros(128, dtype=torch.int32, device="cuda")
    rows = []
    for blocks in (256, 1):
        times = {n: [] for n in NAMES}
        for order in round_orders(list(NAMES), args.rounds):
            for name in order:
                times[name].append(flushed_median_us(lambda: module.launch(name, p, blocks), args.calls))
        for name in NAMES:
            row = {"kernel": name, "blocks": blocks, "rounds_us": [round(t, 3) for t in times[name]],
                   "us": round(statistics.median(times[name]), 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = MOE / "results" / "launch_shared.json"
    out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "environment": environment(),
                               "rows": rows}, indent=1) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
