"""Check the CUDA kernels' logic on the CPU, without a GPU: through the emulation (emulation/router_emulation.py),
the router (topk_router.cu and its dispatch, router_launch.h) on every shape of routing_cuda.path_shapes, and the
sigmoid kernels (sigmoid_launch.h) in every run of topk_sigmoid_cuda.PATH_RUNS on 64, 128 and 256 experts, k 4 and
8, with and without a bias; each output checked by its problem's check, so that a variant's selection or dispatch
mistake shows before a device call is spent on it. Says nothing of speed.

    python examples/moe_topk_sigmoid/benchmarks/moe_emulation_check.py [VARIANT_DIR ...] [--dtype bfloat16 ...]
                                                                       [--tokens 37 ...]

With no folder, the tree's kernels; otherwise each folder (files replacing files of
examples/moe_topk_sigmoid/kernels/, as for moe_variants.py and moe_build_check.py) laid over a copy of them.
Tokens default to 1, 37 and, for the router where the merge kernel serves, routing_cuda.merge_token_counts' (4,099;
up to 32 experts 8,195 and 65,539), for the sigmoid kernels 301; logits rounded to quarters so that ties are common.
Prints each folder's failures and exits 1 if there were any.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = ROOT / "examples" / "moe_topk_sigmoid"
sys.path[:0] = [str(ROOT / "src"), str(Path(__file__).resolve().parent), str(MOE), str(MOE / "emulation")]

import router_emulation as em  # noqa: E402
from moe_variants import KERNELS, kernel_trees  # noqa: E402

DTYPES = ("float32", "float16", "bfloat16")


@functools.cache
def moe_reference():
    """The case study's reference.py (the problems' checks), loaded by its path: in a process that has run another
    problem (a test process whose harness calls import problems' files), the module named `reference` may be that
    problem's."""
    spec = importlib.util.spec_from_file_location("moe_reference", MOE / "reference.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def failures(kernels: Path, dtypes: list[str], tokens: list[int] | None) -> list[str]:
    """router_failures and sigmoid_failures together. The emulation of `kernels` is built first: a build that
    fails raises EmulationError here, once, where each case would otherwise try the build again and fail alike."""
    em.library_path(kernels)
    return router_failures(kernels, dtypes, tokens) + sigmoid_failures(kernels, dtypes, tokens)


def router_failures(kernels: Path, dtypes: list[str], tokens: list[int] | None = None) -> list[str]:
    """Every shape of path_shapes routed by the emulation of the kernels in `kernels` (on 1, 37 and, where the
    merge kernel may take it, merge_token_counts' tokens unless `tokens` says otherwise) and checked: a line for each
    case that failed its check or raised."""
    ref = moe_reference()
    import routing_cuda
    import torch

    g = torch.Generator().manual_seed(0)
    out = []
    for dtype in dtypes:
        for router, experts, k, extra in routing_cuda.path_shapes():
            for n in tokens or (1, 37, *routing_cuda.merge_token_counts(router, experts, k, kernels)):
                x = ((torch.randn(n, experts, generator=g) * 8).round() / 4).to(getattr(torch, dtype))
                bias = torch.randn(experts, generator=g) * 0.1
                try:
                    ok, msg = ref.check_router(lambda *a, **kw: em.route(*a, **kw, kernels=kernels), router, x, bias,
                                               k, extra)
                except (ValueError, em.EmulationError) as e:
                    ok, msg = False, str(e)
                if not ok:
                    out.append(f"{router} experts={experts} k={k} {extra} tokens={n} {dtype}: {msg}")
    return out


def sigmoid_failures(kernels: Path, dtypes: list[str], tokens: list[int] | None) -> list[str]:
    """Every run of topk_sigmoid_cuda.PATH_RUNS through the emulation of the kernels in `kernels`, on each shape
    the sigmoid kernels serve, with and without a bias, checked: a line for each that failed."""
    ref = moe_reference()
    import topk_sigmoid_cuda
    import torch

    g = torch.Generator().manual_seed(1)
    out = []
    for dtype in dtypes:
        for experts in topk_sigmoid_cuda.EXPERTS:
            for k in topk_sigmoid_cuda.KS:
                for biased in (False, True):
                    for n in tokens or (1, 37, 301):
                        x = ((torch.randn(n, experts, generator=g) * 8).round() / 4).to(getattr(torch, dtype))
                        bias = torch.randn(experts, generator=g) * 0.1 if biased else None
                        want = ref.topk_sigmoid(x, bias, k)
                        for algo, bps in topk_sigmoid_cuda.PATH_RUNS:
                            try:
                                ok, msg = ref.check((x, bias, k), em.topk_sigmoid(x, bias, k, algo, bps, kernels), want)
                            except (ValueError, em.EmulationError) as e:
                                ok, msg = False, str(e)
                            if not ok:
                                out.append(f"sigmoid {algo} (blocks_per_sm {bps}) experts={experts} k={k} "
                                           f"bias={biased} tokens={n} {dtype}: {msg}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", type=Path, nargs="*", help="folders of files replacing files of " + str(KERNELS))
    ap.add_argument("--dtype", action="append", choices=DTYPES, help="default: all three")
    ap.add_argument("--tokens", type=int, action="append",
                    help="default: the router 1, 37 and where the merge kernel serves 4,099 (up to 32 experts 8,195 "
                         "and 65,539); the sigmoid kernels 1, 37 and 301")
    args = ap.parse_args()
    if args.tokens and min(args.tokens) < 1:
        ap.error("--tokens must be 1 or more")
    bad = False
    with tempfile.TemporaryDirectory(prefix="moe_emulation_trees_") as tmp:
        for name, kernels in kernel_trees(args.variants, Path(tmp)).items():
            try:
                failed = failures(kernels, args.dtype or list(DTYPES), args.tokens)
            except em.EmulationUnavailable as e:
                sys.exit(str(e))
            except em.EmulationError as e:   # the build failed
                sys.exit(f"{name}: {e}")
            print(f"{name}: {'ok' if not failed else f'{len(failed)} FAILED'}", flush=True)
            for line in failed:
                print(f"  {line}")
            bad = bad or bool(failed)
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
