"""Guards against candidates that fool a harness (docs/gpu-tool-facts.md, last section).

Static: read the candidate's source for the constructs the known cheats need (threads, side streams,
patched timers, introspection of the harness, seeding, computation at import). Runtime helpers used by the
worker: a snapshot of the timing functions to detect patching, poisoning of the memory allocator, input
fingerprints, and the ops and GPU kernels one profiled call runs (library fallback, side streams,
background threads, a fast path that never runs).

Other cheats are defeated by construction in the worker and need no guard here: the reference runs in
another process (stale memory, patched reference), seeds are drawn at random per run (predicted seeds),
every timed call gets fresh inputs and a random sample of timed outputs is checked (cached or replayed
outputs, batched calls), hidden shape variants (specialisation).
"""

from __future__ import annotations

import ast
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpilot.evaluate.result import Flag
from kernelpilot.python_syntax import parse as parse_python

__all__ = ["scan_source", "defined_kernels", "TimerSnapshot", "HookSnapshot", "HarnessSnapshot", "HARNESS_MODULES", "harness_modules", "TORCH_NAMESPACES", "TORCH_CLASSES", "fingerprint", "poison_allocator",
           "TRIVIAL_OPS", "significant_ops"]

_PATCH_ROOTS = {"torch", "time", "triton", "kernelpilot", "builtins", "os", "sys", "threading"}
_THREAD_MODULES = {"threading", "_thread", "multiprocessing", "concurrent", "concurrent.futures", "asyncio"}
_INTROSPECTION = {("gc", "get_objects"), ("gc", "get_referrers"), ("sys", "_getframe"), ("inspect", "stack"),
                  ("inspect", "currentframe"), ("inspect", "getouterframes")}
_STREAM_CALLS = re.compile(r"torch\.cuda\.(Stream|ExternalStream|set_stream)\b|cuda\.stream\(|cudaStreamCreate|"
                           r"\bStream\(\s*\)|get_stream_from_external")


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def scan_source(path: Path) -> list[Flag]:
    """Constructs in a candidate's source that the known cheats need, each with its line."""
    try:
        text = path.read_text(errors="replace")
        tree = parse_python(text)
    except (OSError, SyntaxError):
        return []  # the import will report it
    found: dict[str, list[tuple[int, str]]] = {}

    def add(kind: str, node: ast.AST, what: str) -> None:
        found.setdefault(kind, []).append((getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in _THREAD_MODULES or a.name in _THREAD_MODULES:
                    add("threads", node, f"import {a.name}")
                if a.name.split(".")[0] == "kernelpilot":
                    add("introspection", node, f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in _THREAD_MODULES:
                add("threads", node, f"from {node.module} import ...")
            if node.module.split(".")[0] == "kernelpilot":
                add("introspection", node, f"from {node.module} import ...")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                name = _dotted(t) if isinstance(t, ast.Attribute) else None
                if name and name.split(".")[0] in _PATCH_ROOTS:
                    add("patching", node, f"assigns {name}")
                if isinstance(t, ast.Attribute) and t.attr == "__code__":
                    add("patching", node, "assigns __code__")
        elif isinstance(node, ast.Call):
            fname = _dotted(node.func) or ""
            parts = tuple(fname.split("."))
            if fname in ("setattr", "builtins.setattr") and node.args:
                target = _dotted(node.args[0]) or ""
                if target.split(".")[0] in _PATCH_ROOTS:
                    add("patching", node, f"setattr({target}, ...)")
            if len(parts) >= 2 and parts[-2:] in _INTROSPECTION:
                add("introspection", node, fname)
            if fname.endswith(("manual_seed", "random.seed", "np.random.seed", "numpy.random.seed", "manual_seed_all")):
                add("seeding", node, fname)
            if fname.endswith("Thread") or fname.endswith(("ThreadPoolExecutor", "ProcessPoolExecutor")):
                add("threads", node, fname)
    for m in _STREAM_CALLS.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        found.setdefault("streams", []).append((line, m.group(0)))

    messages = {
        "threads": ("static-threads", "the candidate uses threads or processes, which can do work the timer does not see"),
        "streams": ("static-streams", "the candidate creates or switches CUDA streams; work on another stream is outside the timed stream"),
        "patching": ("static-patching", "the candidate assigns attributes of torch/time/harness modules (patched timers or synchronize)"),
        "introspection": ("static-introspection", "the candidate inspects the process (gc objects, frames, the harness)"),
        "seeding": ("static-seeding", "the candidate seeds random generators (predicting inputs)"),
    }
    flags = []
    for kind, hits in found.items():
        fid, msg = messages[kind]
        hits = sorted(set(hits))
        flags.append(Flag(fid, f"{msg}: " + ", ".join(f"line {l}: {w}" for l, w in hits[:5]), "info",
                          {"lines": [l for l, _ in hits]}))
    return flags


_TRITON_DEF = re.compile(r"@triton\.(?:jit|autotune|heuristics)[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)")
_CUDA_DEF = re.compile(r"__global__\s+(?:void|[\w:<>]+)\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")


def defined_kernels(path: Path) -> list[str]:
    """Names of GPU kernels the candidate defines: Triton JIT functions and CUDA/HIP ``__global__`` functions
    (in load_inline sources)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return sorted(set(_TRITON_DEF.findall(text)) | set(_CUDA_DEF.findall(text)))


# ------------------------------------------------------------------ runtime helpers (worker only)


@dataclass
class _Held:
    obj: Any
    code: Any


class TimerSnapshot:
    """The timing and synchronisation functions as they were before the candidate was imported."""

    NAMES = (
        ("torch.cuda", "synchronize"), ("torch.cuda.Event", "elapsed_time"), ("torch.cuda.Event", "record"),
        ("torch.cuda.Event", "synchronize"), ("torch.cuda", "current_stream"), ("torch.cuda", "Event"),
        ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "time"), ("time", "monotonic"),
        ("torch", "allclose"), ("torch.Tensor", "to"), ("torch.Tensor", "cpu"), ("torch.Tensor", "clone"),
        ("torch.Tensor", "copy_"), ("torch", "equal"), ("os", "urandom"),
        # What runs between a sample's inputs and its end event: the L2 flush (and the buffer's layout, checked
        # before each flush), the spin that leads the start event, and a captured graph's replay. Replaced, each
        # would let candidate code skip the flush or run its work before the start event or off the timed stream.
        ("torch", "amax"), ("torch._C._VariableFunctions", "amax"), ("torch.Tensor", "zero_"),
        ("torch._C.TensorBase", "zero_"), ("torch._C.TensorBase", "data_ptr"), ("torch._C.TensorBase", "size"),
        ("torch._C.TensorBase", "stride"), ("torch._C.TensorBase", "storage_offset"), ("torch.cuda", "_sleep"),
        ("torch.cuda.CUDAGraph", "replay"),
    )

    def __init__(self) -> None:
        self.held: dict[str, _Held] = {}
        for owner, attr in self.NAMES:
            obj = self._get(owner, attr)
            if obj is not None:
                self.held[f"{owner}.{attr}"] = _Held(obj, getattr(obj, "__code__", None))

    @staticmethod
    def _get(owner: str, attr: str):
        import importlib

        try:
            parts = owner.split(".")
            mod = importlib.import_module(parts[0])
            for p in parts[1:]:
                mod = getattr(mod, p)
            return getattr(mod, attr)
        except Exception:
            return None

    def functions(self) -> dict[str, Any]:
        """The held originals, for timing code: ``{"torch.cuda.synchronize": fn, ...}``."""
        return {name: held.obj for name, held in self.held.items()}

    def changed(self) -> list[str]:
        out = []
        for name, held in self.held.items():
            owner, attr = name.rsplit(".", 1)
            now = self._get(owner, attr)
            if now is not held.obj or getattr(now, "__code__", None) is not held.code:
                out.append(name)
        return out


class HookSnapshot:
    """Python's hooks that run code inside whatever code runs: the profile and trace functions (this thread's,
    and those ``threading`` gives new threads), from Python 3.12 the ``sys.monitoring`` tools, the signal
    handlers and interval timers (a handler runs between any two bytecodes once its signal comes), and torch's
    function and dispatch modes (every torch call goes through them; ``torch.set_default_device``'s own
    ``DeviceContext`` aside, which only sets a default device), as they were
    before the candidate was imported (read and set through the functions as they were then). A hook installed
    since could run the candidate's code inside the harness's, e.g. as each timed call's inputs are made, outside
    the timer: ``changed`` names those that differ now, ``restore`` also puts them back as they were (and with
    the garbage collector off while the inputs are made, no finalizer of the candidate's runs to install one
    again before they are made)."""

    def __init__(self) -> None:
        import _signal  # signal's C functions: signal.getsignal converts each answer to an enum, ten times slower
        import gc
        import signal
        import threading

        none = lambda *a: None  # noqa: E731
        self._hooks = (
            ("profile function", sys.getprofile, sys.setprofile),
            ("trace function", sys.gettrace, sys.settrace),
            ("threads' profile function", getattr(threading, "getprofile", none), threading.setprofile),
            ("threads' trace function", getattr(threading, "gettrace", none), threading.settrace),
        )
        monitoring = getattr(sys, "monitoring", None)
        self._monitoring = (monitoring.get_tool, monitoring.set_events, monitoring.free_tool_id) if monitoring else None
        self.gc_off, self.gc_on, self.gc_enabled = gc.disable, gc.enable, gc.isenabled
        self._signals = [(f"{sig.name}'s handler", int(sig)) for sig in signal.valid_signals()
                         if isinstance(sig, signal.Signals) and sig not in (signal.SIGKILL, signal.SIGSTOP)]
        self._timers = [(f"{name.lower().replace('_', '-')} interval timer", getattr(signal, name))
                        for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF") if hasattr(signal, name)]
        self._getsignal, self._signal = _signal.getsignal, _signal.signal
        self._getitimer, self._setitimer = _signal.getitimer, _signal.setitimer
        self._modes = []
        try:
            import torch
            from torch.utils._device import DeviceContext

            c = torch._C
            self._modes = [("torch function modes", c._len_torch_function_stack, c._get_function_stack_at,
                            c._pop_torch_function_stack, c._push_on_torch_function_stack, DeviceContext),
                           ("torch dispatch modes", c._len_torch_dispatch_stack, c._get_dispatch_stack_at,
                            c._pop_torch_dispatch_stack, c._push_on_torch_dispatch_stack, None)]
        except (ImportError, AttributeError):
            pass
        self.held = self._take()

    def _take(self) -> dict[str, Any]:
        now = {name: get() for name, get, _ in self._hooks}
        if self._monitoring is not None:
            now["sys.monitoring tools"] = tuple(self._monitoring[0](i) for i in range(6))
        for name, sig in self._signals:
            now[name] = self._getsignal(sig)
        for name, which in self._timers:
            delay, interval = self._getitimer(which)
            now[name] = (delay > 0, interval)       # set or not, and its period: the time left runs down
        for name, depth, at, _, _, allowed in self._modes:
            now[name] = tuple(m for m in (at(i) for i in range(depth())) if type(m) is not allowed)
        return now

    def changed(self) -> list[str]:
        now = self._take()
        return [name for name, value in self.held.items() if now[name] is not value and now[name] != value]

    def restore(self) -> list[str]:
        """Put back every hook that changed; the names of those that had."""
        changed = self.changed()
        for name, _, put in self._hooks:
            if name in changed:
                put(self.held[name])
        for name, which in self._timers:      # the timers stopped first: their signals' handlers go back next
            if name in changed and not self.held[name][0]:
                self._setitimer(which, 0)
        for name, sig in self._signals:
            if name in changed and self.held[name] is not None:
                try:
                    self._signal(sig, self.held[name])
                except (ValueError, OSError):     # not the main thread: said, not put back
                    pass
        for name, depth, at, pop, push, allowed in self._modes:
            if name in changed:     # the stack emptied, then the modes that may stay pushed again, in order
                stack = [at(i) for i in range(depth())]
                for _ in stack:
                    pop()
                for m in stack:
                    if type(m) is allowed or m in self.held[name]:
                        push(m)
        if "sys.monitoring tools" in changed:
            get_tool, set_events, free = self._monitoring
            for i, held in enumerate(self.held["sys.monitoring tools"]):
                if held is None and get_tool(i) is not None:
                    set_events(i, 0)
                    free(i)
        return changed


# The modules whose functions the harness calls while it times and checks, and the standard library modules
# those call into. A candidate that replaces any of their functions (or a function's code, or a method of one
# of the harness's classes) could change a time or a verdict.
HARNESS_MODULES = (
    "kernelpilot.evaluate.worker", "kernelpilot.evaluate.worker_base", "kernelpilot.evaluate.worker_check",
    "kernelpilot.evaluate.worker_bench", "kernelpilot.evaluate.worker_verify", "kernelpilot.evaluate.jobs",
    "kernelpilot.evaluate.timing", "kernelpilot.evaluate.guards",
    "kernelpilot.evaluate.compare", "kernelpilot.evaluate.outputs", "kernelpilot.evaluate.probe",
    "kernelpilot.evaluate.problem", "statistics", "json", "json.encoder", "json.decoder", "time", "os", "struct",
    "hashlib", "math", "builtins", "pickle", "threading",
)


def harness_modules() -> tuple[str, ...]:
    """``HARNESS_MODULES`` and every other module of kernelpilot loaded now (in a worker: the problem's runtime
    among them, whose methods make each timed call's inputs before its timer starts)."""
    loaded = sorted(n for n in list(sys.modules) if n.startswith("kernelpilot.") and n not in HARNESS_MODULES)
    return HARNESS_MODULES + tuple(loaded)


# torch's own namespaces: the problem's code calls them to make each timed call's inputs, and the harness's guards
# to fingerprint those, after the call before was timed and before the next one is. A candidate that replaced one
# of their functions, or shadowed a method of torch.Tensor, would be handed each call's inputs outside the timer
# (its work done there, the timed call only returning it). Their functions are compared by identity (names torch
# adds later are not: it adds some lazily); torch.Tensor's attributes, any added since too.
TORCH_NAMESPACES = ("torch", "torch.cuda", "torch.nn.functional")
TORCH_CLASSES = ("torch.Tensor",)
# Replaced by torch itself: Dynamo wraps torch.manual_seed when it is first imported (by a candidate's or the
# baseline's torch.compile). Seeding comes before a call's inputs exist, and inputs seeded otherwise than the
# harness's seed says fail the re-check against the reference's (``input-mismatch``).
TORCH_REWRAPPED = frozenset({"torch.manual_seed"})


class HarnessSnapshot:
    """Every function and class of ``HARNESS_MODULES`` (and every method of the harness's own classes), every
    function of ``TORCH_NAMESPACES``, every attribute of ``TORCH_CLASSES`` and every global of ``problem_modules``
    (the problem's files, whose code makes each timed call's inputs: a global such as ``torch`` replaced there by
    a proxy would hand the candidate those inputs), by identity and code object, as they were before the
    candidate was imported; ``changed`` names what differs now, and what was added to the harness's modules
    (public names) or to those classes. Names a ``TimerSnapshot`` covers are left to it."""

    def __init__(self, modules: tuple[str, ...] = HARNESS_MODULES, skip: set[str] | None = None,
                 torch_modules: tuple[str, ...] = TORCH_NAMESPACES, classes: tuple[str, ...] = TORCH_CLASSES,
                 problem_modules: tuple[str, ...] = ()) -> None:
        import importlib

        def load(names: tuple[str, ...]) -> dict[str, Any]:
            out = {}
            for name in names:
                try:
                    out[name] = importlib.import_module(name)
                except ImportError:
                    continue
            return out

        self.modules = load(modules)
        self.torch_modules = load(torch_modules)
        self.problem_modules = load(problem_modules)
        self.classes = {}
        for name in classes:
            owner, attr = name.rsplit(".", 1)
            cls = getattr(load((owner,)).get(owner), attr, None)
            if isinstance(cls, type):
                self.classes[name] = cls
        self.skip = skip or set()
        self.held = self._take()

    def _take(self) -> dict[str, tuple[int, Any, str]]:
        """``{name: (identity, code object, kind)}``; kind says whether an added name counts: ``harness`` (a
        public one), ``class`` (any) or ``torch`` and ``problem`` (none)."""
        held: dict[str, tuple[int, Any, str]] = {}
        for kind, modules in (("harness", self.modules), ("torch", self.torch_modules)):
            for mname, mod in modules.items():
                own = mname.startswith("kernelpilot.")
                for attr, value in list(vars(mod).items()):
                    if not (callable(value) or isinstance(value, type)) or isinstance(value, type(mod)):
                        continue
                    key = f"{mname}.{attr}"
                    if key in self.skip or key in TORCH_REWRAPPED:
                        continue
                    held[key] = (id(value), getattr(value, "__code__", None), kind)
                    if own and isinstance(value, type) and value.__module__ == mname:
                        for k, v in list(vars(value).items()):
                            fn = getattr(v, "__func__", v)
                            if callable(fn):
                                held[f"{key}.{k}"] = (id(fn), getattr(fn, "__code__", None), kind)
        for mname, mod in {**self.modules, **self.torch_modules, **self.problem_modules}.items():
            # the module a later import of the name gets: a copy swapped in would serve its own functions
            held[f"sys.modules[{mname!r}]"] = (id(sys.modules.get(mname)), None, "harness")
        for mname, mod in self.problem_modules.items():
            where = Path(getattr(mod, "__file__", None) or mname).name     # named by its file: reference.py:torch
            for attr, value in list(vars(mod).items()):
                held[f"{where}:{attr}"] = (id(value), getattr(value, "__code__", None), "problem")
        for cname, cls in self.classes.items():
            for attr, value in list(vars(cls).items()):
                key = f"{cname}.{attr}"
                if key not in self.skip:
                    fn = getattr(value, "__func__", value)
                    held[key] = (id(fn), getattr(fn, "__code__", None), "class")
        return held

    def changed(self) -> list[str]:
        now = self._take()
        missing = (None, None, None)
        out = [k for k, v in self.held.items() if now.get(k, missing)[0] != v[0] or now.get(k, missing)[1] is not v[1]]
        out += [k for k, v in now.items() if k not in self.held
                and (v[2] == "class" or (v[2] == "harness" and not k.rsplit(".", 1)[-1].startswith("_")))]
        return sorted(out)


# Tensor digests: a keyed sum of the tensor's 64-bit words, mod 2**64, computed with integer tensor ops where
# the tensor lives (no copy to the host; the same number on CPU and GPU, since wrapping addition does not
# depend on the order of the sum). Every key is odd, so a change to any one word changes the digest; unrelated
# contents collide with probability about 2**-64. Word j of chunk i has key base[j] * odd(i).
_DIGEST_WORDS = 1 << 22          # words per chunk (32 MiB)
_K1 = -7046029254386353131       # 0x9E3779B97F4A7C15 as a signed 64-bit integer
_K2 = -4658895280553007687       # 0xBF58476D1CE4E5B9
_K3 = 0x632BE59BD9B4E019
_digest_keys: dict[str, Any] = {}


def _wrap64(x: int) -> int:
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >> 63 else x


def _keys(device) -> Any:
    import torch

    k = _digest_keys.get(str(device))
    if k is None:
        k1, k2, k3 = (torch.tensor(c, dtype=torch.int64, device=device) for c in (_K1, _K2, _K3))
        k = torch.arange(_DIGEST_WORDS, dtype=torch.int64, device=device) * k1 + k3
        k = ((k ^ (k >> 31)) * k2) | 1
        _digest_keys[str(device)] = k
    return k


def tensor_digest(t) -> bytes:
    """16 bytes that identify a tensor's contents (its bytes in memory order), computed on its own device."""
    import torch

    b = t.detach().contiguous().reshape(-1).view(torch.uint8)
    n8 = b.numel() // 8
    total = 0
    if n8:
        keys = _keys(b.device)
        words = b[: n8 * 8].view(torch.int64)
        sums = []
        for start in range(0, n8, _DIGEST_WORDS):
            w = words[start:start + _DIGEST_WORDS]
            sums.append((w * keys[:w.numel()]).sum())
        for i, s in enumerate(torch.stack(sums).tolist()):
            total += s * (_wrap64(i * _K2 + _K1) | 1)
    tail = b[n8 * 8:].cpu().numpy().tobytes()
    return _wrap64(total).to_bytes(8, "little", signed=True) + hashlib.sha256(tail).digest()[:8]


def fingerprint(obj: Any) -> str:
    """A hash of every tensor's contents, shape and dtype in a nested value (plain values by repr)."""
    import torch

    h = hashlib.sha256()

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            h.update(f"T{tuple(x.shape)}{x.dtype}".encode())
            if x.numel():
                h.update(tensor_digest(x))
        elif isinstance(x, (tuple, list)):
            h.update(b"(")
            for y in x:
                walk(y)
            h.update(b")")
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                h.update(str(k).encode())
                walk(x[k])
        elif hasattr(x, "__dataclass_fields__"):
            for k in x.__dataclass_fields__:
                walk(getattr(x, k))
        else:
            h.update(repr(x).encode())

    walk(obj)
    return h.hexdigest()[:32]


def poison_allocator(device: str, nbytes: int) -> None:
    """Fill memory the caching allocator will hand out next with 0xFF bytes (NaN for floats, -1 for ints), so
    an output the candidate allocates and never writes fails the check instead of holding stale data."""
    import torch

    if not device.startswith("cuda"):
        return
    blocks = []
    try:
        big = max(nbytes, 1 << 20)
        blocks.append(torch.empty(big, dtype=torch.uint8, device=device).fill_(0xFF))
        for _ in range(16):   # the small-allocation pool (<= 1 MiB requests)
            blocks.append(torch.empty(1 << 19, dtype=torch.uint8, device=device).fill_(0xFF))
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        pass
    del blocks


# aten ops that do no real computation: allocation, views, copies, fills, indexing plumbing.
TRIVIAL_OPS = frozenset("""
empty empty_like empty_strided zeros zeros_like ones ones_like full full_like new_empty new_zeros new_ones new_full
new_empty_strided view view_as reshape _reshape_alias _unsafe_view as_strided t transpose permute contiguous clone
copy_ _to_copy to detach detach_ alias expand expand_as unsqueeze squeeze flatten unflatten select slice narrow
split split_with_sizes chunk unbind fill_ zero_ resize_ set_ lift_fresh item _local_scalar_dense is_nonzero
result_type size stride numel dim arange lift record_stream _has_compatible_shallow_copy_type cat stack
""".split())


def significant_ops(ops: set[str]) -> set[str]:
    return {o for o in ops if o.removeprefix("aten::").rstrip("_") not in TRIVIAL_OPS
            and o.removeprefix("aten::") not in TRIVIAL_OPS}
