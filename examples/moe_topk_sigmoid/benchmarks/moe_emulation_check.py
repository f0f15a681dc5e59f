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
With --random N, instead: N router calls of shapes, rules and inputs drawn at random (random_cases: 8 to 512
experts, k 1 to 16 within them, any grouping that divides the experts, every dtype, 1 to 8,195 tokens; logits with
ties, saturating the sigmoid, nearly equal or all equal; rows that are an offset view of a wider tensor), each
checked: shapes no list of paths names, as a held-out user's would be.
Prints each folder's failures and exits 1 if there were any.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import random
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
    import routing_cuda
    import torch

    g = torch.Generator().manual_seed(0)
    out = []
    for dtype in dtypes:
        for router, experts, k, extra in routing_cuda.path_shapes():
            for n in tokens or (1, 37, *routing_cuda.merge_token_counts(router, experts, k, kernels)):
                x = ((torch.randn(n, experts, generator=g) * 8).round() / 4).to(getattr(torch, dtype))
                bias = torch.randn(experts, generator=g) * 0.1
                msg = route_failure(kernels, router, x, bias, k, extra)
                if msg:
                    out.append(f"{router} experts={experts} k={k} {extra} tokens={n} {dtype}: {msg}")
    return out


def route_failure(kernels: Path, router: str, x, bias, k: int, extra: dict) -> str | None:
    """One call routed by the emulation of the kernels in `kernels` and checked by its problem's check: what failed
    (the check's message, or the error raised), None where it passed."""
    try:
        ok, msg = moe_reference().check_router(lambda *a, **kw: em.route(*a, **kw, kernels=kernels), router, x, bias,
                                               k, extra)
    except (ValueError, em.EmulationError) as e:
        ok, msg = False, str(e)
    return None if ok else msg


@dataclasses.dataclass(frozen=True)
class RandomCase:
    """One router call of random_cases: its shape, rule and how its inputs are drawn (`seed`)."""

    router: str
    experts: int
    k: int
    extra: dict
    dtype: str
    tokens: int
    logits: str        # a kind of LOGIT_KINDS
    bias_scale: float
    offset_view: bool  # the rows an offset view of a tensor wider by 3 experts (not 16-byte aligned)
    seed: int

    def __str__(self) -> str:
        view = " offset view" if self.offset_view else ""
        return (f"{self.router} experts={self.experts} k={self.k} {self.extra} tokens={self.tokens} {self.dtype} "
                f"logits={self.logits} bias*{self.bias_scale}{view} seed={self.seed}")


# How random_cases draws logits (times a standard normal, then as stated): rounded to quarters (ties), plain, wide
# (the sigmoid saturates: scores equal in fp32, the bias deciding), nearly equal, and one value a whole row.
LOGIT_KINDS = ("quarters", "normal", "wide", "tiny", "constant")


def random_cases(n: int, seed: int) -> list[RandomCase]:
    """n router calls drawn from `seed`: router, experts (8 to 512, often small or a common size), k (1 to 16 within
    the experts), for grouped selections n_group among the divisors of the experts up to MAX_GROUPS and topk_group
    whose groups hold k experts or more, dtype, tokens (the launch thresholds' neighbours among them), how the
    logits are drawn and how wide the bias is."""
    import routing_cuda

    rng = random.Random(seed)
    out = []
    while len(out) < n:
        router = rng.choice(list(routing_cuda.ROUTERS))
        experts = rng.choice([rng.randint(8, 512), rng.randint(8, 64),
                              rng.choice([8, 16, 32, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512])])
        k = rng.randint(1, min(routing_cuda.MAX_K, experts))
        extra = {}
        if router == "softmax":
            extra = {"renormalize": rng.random() < 0.5}
        elif router == "grouped":
            n_group = rng.choice([d for d in range(1, routing_cuda.MAX_GROUPS + 1) if experts % d == 0])
            least = -(-k // (experts // n_group))   # groups that hold k experts
            if least > n_group:
                continue
            extra = {"n_group": n_group, "topk_group": rng.randint(least, n_group)}
        out.append(RandomCase(router, experts, k, extra, rng.choice(DTYPES),
                              rng.choice([1, 2, 3, 7, 33, 37, 100, 129, 4099, 8195]), rng.choice(LOGIT_KINDS),
                              rng.choice([0.0, 0.1, 1.0, 5.0]), rng.random() < 0.15, rng.randrange(2**31)))
    return out


def random_case_inputs(case: RandomCase):
    """(logits, bias) of a RandomCase, drawn from its seed."""
    import torch

    g = torch.Generator().manual_seed(case.seed)
    x = torch.randn(case.tokens, case.experts, generator=g)
    x = {"quarters": (x * 8).round() / 4, "normal": x, "wide": x * 30, "tiny": x * 1e-3,
         "constant": torch.full_like(x, float(x[0, 0]))}[case.logits].to(getattr(torch, case.dtype))
    if case.offset_view:
        wide = torch.zeros(case.tokens, case.experts + 3, dtype=x.dtype)
        wide[:, 1:case.experts + 1] = x
        x = wide[:, 1:case.experts + 1]
    return x, torch.randn(case.experts, generator=g) * case.bias_scale


def random_failures(kernels: Path, cases: list[RandomCase]) -> list[str]:
    """Each RandomCase routed by the emulation of the kernels in `kernels` and checked: a line for each that failed
    its check or raised. The emulation is built first, as in `failures`."""
    em.library_path(kernels)
    out = []
    for case in cases:
        msg = route_failure(kernels, case.router, *random_case_inputs(case), case.k, case.extra)
        if msg:
            out.append(f"{case}: {msg}")
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
    ap.add_argument("--random", type=int, metavar="N", help="N router calls of random shapes and inputs instead")
    ap.add_argument("--seed", type=int, default=0, help="--random's seed (default 0)")
    args = ap.parse_args()
    if args.tokens and min(args.tokens) < 1:
        ap.error("--tokens must be 1 or more")
    if args.random is not None and (args.random < 1 or args.dtype or args.tokens):
        ap.error("--random must be 1 or more, without --dtype or --tokens (each case draws its own)")
    cases = random_cases(args.random, args.seed) if args.random else None
    bad = False
    with tempfile.TemporaryDirectory(prefix="moe_emulation_trees_") as tmp:
        for name, kernels in kernel_trees(args.variants, Path(tmp)).items():
            try:
                failed = (random_failures(kernels, cases) if cases
                          else failures(kernels, args.dtype or list(DTYPES), args.tokens))
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
