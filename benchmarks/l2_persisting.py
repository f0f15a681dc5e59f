"""What inputs kept in the L2 through the flush gain, and what is left of it once the flush demotes persisting lines.

A memory-bound call (the sum of a tensor of MIB MiB, made anew before each call where the last one was) timed by
kpilot's GPU sampler three ways in one process, each size in turn: plainly; as the cheat
`examples/problems/row_softmax/cheats/persisting_l2.py` does it (L2 set aside for persisting lines, the stream's
accesses around the input marked persisting), with a flush that does not demote them (what a harness without the
demotion would time); and the same with the flush as kpilot makes it (`timing.PersistingL2` first: the set-aside
back to 0, the lines demoted). Between the ways the persisting state is cleared. Also the L2 set aside when the
process starts (the driver's default, or what an MPS server set) and the host time of one clearing. Writes
benchmarks/results/l2_persisting.json. Run (NVIDIA GPU, sm_80+):

    python benchmarks/l2_persisting.py [--mib 4 16 32] [--budget 1.0]
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(Path(__file__).resolve().parent)]

from _common import write_results  # noqa: E402

CHEAT = ROOT / "examples" / "problems" / "row_softmax" / "cheats" / "persisting_l2.py"


def _cheat():
    spec = importlib.util.spec_from_file_location("persisting_l2_cheat", CHEAT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _clear(cheat, torch) -> None:
    """No L2 set aside, no line persisting, no window on the current stream."""
    torch.cuda.synchronize()
    lib = cheat._cuda
    lib.cuCtxSetLimit(cheat._LIMIT_PERSISTING_L2, ctypes.c_size_t(0))
    lib.cuCtxResetPersistingL2Cache()
    window = cheat._Window(0, 0, 0.0, cheat._NORMAL, cheat._NORMAL)
    lib.cuStreamSetAttribute(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), cheat._STREAM_WINDOW,
                             ctypes.byref(window))


def time_one(mib: int, way: str, budget: float, cheat, torch) -> dict:
    from kernelpilot.evaluate.timing import PersistingL2, TimingOptions, gpu_sampler, measure

    n = mib * (1 << 20) // 4
    state = {"x": torch.randn(n, device="cuda")}

    def prepare(i: int) -> None:
        state.pop("x")
        state["x"] = torch.randn(n, device="cuda")   # the allocator hands out the memory the last one had
        torch.cuda.synchronize()

    def call():
        if way != "plain":
            cheat._persist_around(state["x"])
        return state["x"].sum()

    demote = PersistingL2(torch.cuda.synchronize)
    clock = {"cuda.persisting_l2": (lambda: None) if way == "persisting, not demoted" else demote}
    sampler = gpu_sampler(call, prepare=prepare, clock=clock)
    t = measure(sampler, "cuda-events", TimingOptions(budget_s=budget))
    _clear(cheat, torch)
    return {"mib": mib, "way": way, "median_us": t.median_us, "iqr_us": t.iqr_us, "n": t.n,
            "flushes_cleared": demote.cleared, "flushes_found_set": demote.found}


def clearing_us(cheat, torch, calls: int = 50) -> float:
    """Host time of one clearing (device synchronize, the set-aside back to 0, every persisting line demoted), L2
    set aside before each: what a flush pays where it has to."""
    import time

    from kernelpilot.evaluate.timing import PersistingL2

    x = torch.empty(1 << 20, device="cuda")
    demote, took = PersistingL2(torch.cuda.synchronize), 0.0
    for _ in range(calls):
        cheat._persist_around(x)
        torch.cuda.synchronize()
        t = time.perf_counter()
        demote()
        took += time.perf_counter() - t
    _clear(cheat, torch)
    if demote.cleared != calls:
        sys.exit(f"l2_persisting.py: {demote.cleared} of {calls} clearings found L2 set aside")
    return round(took / calls * 1e6, 2)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, nargs="+", default=[4, 16, 32])
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls for each way")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("l2_persisting.py: needs an NVIDIA GPU")
    cheat = _cheat()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()   # the context made, nothing set by this process yet
    at_start = cheat._set_aside()
    print(f"L2 set aside for persisting lines at start: {at_start} bytes")
    _clear(cheat, torch)
    rows = []
    for mib in args.mib:
        for way in ("plain", "persisting, not demoted", "persisting, demoted"):
            rows.append(time_one(mib, way, args.budget, cheat, torch))
            print(rows[-1], flush=True)
    for mib in args.mib:
        by = {r["way"]: r["median_us"] for r in rows if r["mib"] == mib}
        print(f"{mib} MiB: plain {by['plain']:.1f} us, kept in L2 {by['persisting, not demoted']:.1f} us, "
              f"demoted {by['persisting, demoted']:.1f} us")
    clearing = clearing_us(cheat, torch)
    print(f"one clearing: {clearing} us of host time")
    path = write_results("l2_persisting", {"device": torch.cuda.get_device_name(), "set_aside_at_start": at_start,
                                           "rows": rows, "clearing_host_us": clearing})
    print("wrote", path)


if __name__ == "__main__":
    main()
