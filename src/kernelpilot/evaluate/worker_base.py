"""What every worker role shares: the journal to the parent (bound when the process starts, before any candidate
code runs), copies between devices, and the ``Worker`` base class (the job, the problem's runtime, flags,
phases). The roles: ``worker_check.CheckWorker``,
``worker_bench.BenchWorker``, ``worker_verify.VerifyWorker``; the process's entry point is ``worker.py``.

Runs only in worker processes.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError, shorten
from kernelpilot.evaluate.jobs import Job

__all__ = ["Worker", "ProblemError"]

# Bound when the worker starts, before any candidate code runs. The variable naming the descriptor is removed
# and the descriptor is not passed to programs the worker executes.
_JOURNAL_FD = int(os.environ.pop("KPILOT_JOURNAL_FD", "-1"))
if _JOURNAL_FD >= 0:
    try:
        os.set_inheritable(_JOURNAL_FD, False)
    except OSError:
        _JOURNAL_FD = -1
_write = os.write
_dumps = json.dumps
_exit = os._exit
_close = os.close
_fstat = os.fstat


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _journal(record: dict[str, Any], fd: int | None = None) -> None:
    """Write ``record`` to the journal (or to ``fd``, the journal as the caller found it earlier)."""
    fd = _JOURNAL_FD if fd is None else fd
    if fd < 0:
        return
    data = (_dumps(record, default=str) + "\n").encode()
    try:
        while data:
            data = data[_write(fd, data):]
    except OSError:
        pass


def _journal_identity() -> tuple[int, tuple[int, int] | None]:
    """The journal's descriptor and the pipe it is (device and inode), to tell later whether either changed."""
    fd = _JOURNAL_FD
    try:
        st = _fstat(fd) if fd >= 0 else None
    except OSError:
        st = None
    return fd, (st.st_dev, st.st_ino) if st is not None else None


def _seed() -> int:
    return struct.unpack("<I", os.urandom(4))[0] & 0x7FFFFFFF


def _to(obj: Any, device: str, *, copy: bool = True):
    """Every tensor in a nested value on ``device``: a private copy even on the same device, or with
    ``copy=False`` moved only where it lies elsewhere."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device, copy=copy)
    if isinstance(obj, tuple):
        return tuple(_to(x, device, copy=copy) for x in obj)
    if isinstance(obj, list):
        return [_to(x, device, copy=copy) for x in obj]
    if isinstance(obj, dict):
        return {k: _to(v, device, copy=copy) for k, v in obj.items()}
    if hasattr(obj, "__dataclass_fields__") and not isinstance(obj, type):
        import dataclasses

        return dataclasses.replace(obj, **{f: _to(getattr(obj, f), device, copy=copy)
                                           for f in obj.__dataclass_fields__ if obj.__dataclass_fields__[f].init})
    return obj


def _new_step(collect: bool = False) -> None:
    """Before each call of the candidate: where torch.compile's CUDA-graph trees are loaded (``mode=
    "reduce-overhead"``), begin a new step, as a training or serving loop does between iterations. The harness
    copies what it keeps of each output and lets the rest go, so no call continues the previous one. With
    ``collect`` (between checked calls, untimed), first collect garbage: an earlier output the harness let go but
    that a reference cycle still holds is freed, not found live in the trees' memory pool (which they refuse). A
    candidate that never loaded the trees pays one dictionary look-up. In a timed call it runs inside the timer,
    so whatever the candidate put in its place is timed with the call."""
    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    if trees is not None:
        if collect:
            import gc

            gc.collect()
        trees.mark_step_begin()


def _nbytes(obj: Any) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(_nbytes(x) for x in obj.values())
    if hasattr(obj, "__dataclass_fields__") and not isinstance(obj, type):
        return sum(_nbytes(getattr(obj, f)) for f in obj.__dataclass_fields__)
    return 0


def _plain_output(obj: Any) -> str | None:
    """Why ``obj`` is not an acceptable output, or None (see ``outputs.plain_output``)."""
    from kernelpilot.evaluate.outputs import plain_output

    return plain_output(obj)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _cuda_broken(exc: BaseException) -> bool:
    text = str(exc)
    return any(s in text for s in ("CUDA error", "illegal memory access", "device-side assert", "CUDA-capable",
                                   "unspecified launch failure", "misaligned address", "AcceleratorError"))


def _err(exc: BaseException) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    tail = "".join(tb[-3:]).strip()
    return shorten(f"{type(exc).__name__}: {exc}", 2000) + ("\n" + tail[-1500:] if tail else "")


# Host memory for inputs made ahead (check's plan, a bench batch) when running on the CPU.
_HOST_BYTES = 4 << 30


def _cache_bytes(device: str) -> int:
    """How many bytes of expected outputs a serving reference worker keeps: a quarter of the device's memory,
    or 2 GiB on the CPU."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory * 0.25)
    return 2 << 30


def _resident_bytes(device: str) -> int:
    """How many bytes of inputs to keep made ahead: 40% of the device's free memory (the rest serves the
    candidate, its outputs and copies), or 4 GiB on the CPU."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info()
        return int(free * 0.4)
    return _HOST_BYTES


class ProblemError(Exception):
    """The problem's own code failed (not the candidate's)."""


def _copy_into(dst: Any, src: Any) -> None:
    import torch

    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
    elif isinstance(dst, (tuple, list)):
        for d, s in zip(dst, src):
            _copy_into(d, s)
    elif isinstance(dst, dict):
        for k in dst:
            _copy_into(dst[k], src[k])


def _low_signal(expected: Any, problem) -> str | None:
    import torch

    from kernelpilot.evaluate.compare import flatten

    leaves = [t for _, t in flatten(expected) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()]
    if not leaves:
        return None
    for t in leaves:
        tol = problem.tolerance_for(str(t.dtype))
        if float(t.detach().abs().to(torch.float64).nan_to_num(0).max()) > max(tol.atol, 1e-12) * 10:
            return None
    return "the reference output is within 10x atol of zero: an all-zero answer would pass the elementwise test"


class Worker:
    """A worker's job in progress: what every role does the same way."""

    def __init__(self, job: Job, work_dir: Path, *, runtime=None, state: dict | None = None) -> None:
        from kernelpilot.evaluate.formats import runtime_for

        self.job = job
        self.device = job.device
        self.problem = job.problem
        self.out_dir = Path(work_dir)
        self.state = state if state is not None else {}     # kept across the jobs of a serving reference worker
        self.result: dict[str, Any] = {"role": job.role, "mode": job.mode, "flags": [], "notes": []}
        if self.device.startswith("cuda"):
            import torch

            self.result["gpu"] = torch.cuda.get_device_name()
        try:
            self.rt = runtime if runtime is not None else runtime_for(self.problem)
        except Exception as e:
            raise ProblemError(str(e) if isinstance(e, KernelpilotError) else _err(e)) from None

    @contextmanager
    def phase(self, name: str):
        """Add the wall time of the block to ``phases_s[name]`` (where an evaluation's seconds go)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            phases = self.result.setdefault("phases_s", {})
            phases[name] = round(phases.get(name, 0.0) + time.perf_counter() - t0, 3)

    def flag(self, id: str, message: str, level: str = "error", **evidence) -> None:
        if any(f["id"] == id and f["message"] == message for f in self.result["flags"]):
            return   # once per distinct finding (a case runs several seeds)
        self.result["flags"].append({"id": id, "message": message, "level": level, "evidence": evidence})

    def cases(self, names: list[str]):
        return [self.problem.case(n) for n in names]

    def _significant(self, ops) -> set[str]:
        from kernelpilot.evaluate.guards import significant_ops

        return significant_ops(set(ops))
