"""Compile a Triton kernel offline (no GPU, no driver) for one target and keep every stage's output.

    build = compile_triton("examples/kernels/softmax_triton.py:softmax_kernel", arch="gfx942")
    build.asm["amdgcn"], build.binary_path, build.metadata["shared"]

A kernel is named ``path/to/file.py:kernel_name``. What Triton needs besides the source (the type of each
runtime argument, the value of each ``tl.constexpr``, ``num_warps``, ``num_stages``) comes from the arguments
of ``compile_triton`` or, for what they leave out, from a declaration in the file::

    KPILOT_SPECS = {
        "softmax_kernel": {
            "signature": {"out_ptr": "*fp32", "in_ptr": "*fp32", "n_cols": "i32"},   # or "out_ptr:*fp32,..."
            "constexprs": {"BLOCK_SIZE": 256},
            "num_warps": 4,
            "num_stages": 2,                      # optional
            "options": {"waves_per_eu": 2},       # optional: any other Triton compile option
        },
        # several named variants: a list; the first is the default, pick another with variant="wide"
        "other_kernel": [{"name": "small", ...}, {"name": "wide", ...}],
    }

Then the first ``triton.autotune`` config (when the kernel has one) and the parameters' own defaults fill
what is still missing. Arguments override the declaration parameter by parameter.

Signature types are Triton's (``*fp32`` pointer, ``i32``, ``fp32``, ``i1``, ``*bf16`` ...), optionally with a
divisibility hint as in Triton's ahead-of-time compiler: ``n:i32:16`` says n is a multiple of 16 (Triton
specializes a launch that way). Pointers get ``:16`` by default, since a real launch with torch tensors gets
it, and the code Triton generates (vector width) depends on it; write ``*fp32:1`` to drop it. On AMD, pointers
also get the "within 2 GB" attribute a real launch gets (buffer loads), unless AMDGCN_USE_BUFFER_OPS=0.
A non-constexpr parameter given a value in ``constexprs`` is specialized to that constant, as Triton does.

Nothing here touches a GPU: the target is given explicitly, and while the file is imported and compiled
Triton's active driver is replaced by one that only answers "which target" (Triton asks it in
``language.target_info`` and for TMA support; without a GPU the real lookup fails, and on a GPU host it
would answer for the local GPU, not the target being compiled for). For the same reason, and because it
captures file descriptors 1 and 2 while Triton runs, ``compile_triton`` is not thread-safe: compile in
parallel with processes, not threads.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import importlib.util
import inspect
import itertools
import json
import linecache
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

from kernelpilot.errors import CompileError, KernelpilotError, ToolNotFoundError, UsageError
from kernelpilot.variant_origin import importable_beside

__all__ = [
    "SPECS_NAME",
    "TritonBuild",
    "compile_triton",
    "parse_signature",
    "parse_constexprs",
    "parse_arch",
    "list_jit_kernels",
    "amd_linker_env",
]

SPECS_NAME = "KPILOT_SPECS"
"""The module-level name of the declaration a kernel file may carry."""

_SPEC_KEYS = ("name", "signature", "constexprs", "num_warps", "num_stages", "options")

# Scalar types Triton's signature strings accept (union over Triton 3.2 .. 3.9); a pointer is "*" + one of
# them, "*k" + one of them for a const pointer.
_SCALAR_TYPES = frozenset({
    "i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64",
    "fp8e4nv", "fp8e4b8", "fp8e4b15", "fp8e5", "fp8e5b16", "fp8e8m0",
    "fp16", "bf16", "fp32", "fp64",
})
_SIGNATURE_SYNTAX = "NAME:TYPE[,NAME:TYPE...] such as 'x_ptr:*fp32,y_ptr:*fp32,n:i32' (TYPE may end in :16)"


@dataclass
class TritonBuild:
    """One Triton kernel compiled for one target, with every artifact Triton kept.

    ``asm`` maps Triton's stage names to their output: ``ttir``, ``ttgir``, ``llir`` and, for NVIDIA, ``ptx``
    and ``cubin`` (bytes), for AMD ``amdgcn`` and ``hsaco`` (bytes); newer Tritons also keep ``source`` (the
    IR straight from the AST). ``paths`` holds where each was written in ``workdir``.
    """

    kernel_name: str                     # the Python name of the @triton.jit function
    arch: str                            # as requested: sm_90, gfx942
    vendor: Literal["nvidia", "amd"]
    asm: dict[str, str | bytes]
    metadata: dict[str, Any]             # Triton's compiled metadata, as JSON values
    num_warps: int
    num_stages: int
    warp_size: int
    block_size: int                      # threads per block: num_warps * warp_size
    signature: dict[str, str]            # runtime parameters and their types, hints included ("*fp32:16")
    constexprs: dict[str, Any]           # every constant the kernel was specialized with
    symbol: str                          # the kernel's symbol in the binary (Triton's metadata "name")
    binary_arch: str                     # what the binary is for: sm_90a where Triton picks it, gfx942
    source: str                          # the spec, path:kernel
    workdir: Path
    binary_path: Path                    # the cubin or hsaco
    asm_path: Path                       # the PTX (NVIDIA) or the AMDGCN assembly (AMD)
    paths: dict[str, Path] = field(default_factory=dict)   # every stage's file, and "metadata"
    # NVIDIA only: `ptxas -v` on this build's PTX with the options Triton used. It is ptxas's own resource
    # report (registers, spills, stack, shared memory) for exactly this cubin; Triton's metadata has no
    # register count offline (it reads n_regs from the driver when it loads the binary on a GPU).
    ptxas_report: str | None = None
    ptxas_command: list[str] | None = None
    ptxas_matches_cubin: bool | None = None   # our ptxas run produced the very cubin Triton built
    variant: str | None = None           # the declaration variant used, if the file declares several
    triton_version: str = ""
    compile_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)      # where values came from, things worth knowing
    warnings: list[str] = field(default_factory=list)   # what Triton and its C++ passes printed

    @property
    def binary(self) -> bytes:
        data = self.asm["cubin" if self.vendor == "nvidia" else "hsaco"]
        assert isinstance(data, bytes)
        return data

    def to_json(self) -> dict[str, Any]:
        """Everything but the artifacts' contents (they are in the files named by ``paths``)."""
        return {
            "kernel_name": self.kernel_name,
            "symbol": self.symbol,
            "arch": self.arch,
            "binary_arch": self.binary_arch,
            "vendor": self.vendor,
            "source": self.source,
            "variant": self.variant,
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "warp_size": self.warp_size,
            "block_size": self.block_size,
            "signature": dict(self.signature),
            "constexprs": {k: _jsonable(v) for k, v in self.constexprs.items()},
            "metadata": self.metadata,
            "binary_path": str(self.binary_path),
            "asm_path": str(self.asm_path),
            "paths": {k: str(v) for k, v in self.paths.items()},
            "stages": sorted(self.asm),
            "ptxas_report": self.ptxas_report,
            "ptxas_command": self.ptxas_command,
            "ptxas_matches_cubin": self.ptxas_matches_cubin,
            "triton_version": self.triton_version,
            "compile_seconds": round(self.compile_seconds, 3),
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }


# --------------------------------------------------------------------------------------------------
# Parsing what a user types


def parse_arch(arch: str) -> tuple[Literal["nvidia", "amd"], int | str, int]:
    """``sm_90`` -> ("nvidia", 90, 32); ``gfx942`` -> ("amd", "gfx942", 64). Triton takes the capability
    as an int and picks the arch-specific variant itself (``sm_90a`` for wgmma, ``sm_100a`` for tcgen05),
    so ``sm_90a`` maps to 90 as well. Whether the arch is one kernelpilot knows is the caller's check."""
    a = arch.strip().lower()
    m = re.fullmatch(r"sm_?(\d{2,3})[af]?", a)
    if m:
        return "nvidia", int(m.group(1)), 32
    m = re.fullmatch(r"gfx([0-9a-f]{3,4})", a)
    if m:
        # CDNA and GCN (gfx9xx) run 64-wide waves; RDNA (gfx10xx and later) 32-wide, as Triton assumes.
        warp = 64 if len(m.group(1)) == 3 else 32
        return "amd", a, warp
    raise UsageError(f"arch {arch!r} is neither an NVIDIA sm_XX nor an AMD gfxNNN name; "
                     "give one such as sm_90 or gfx942.")


def parse_signature(text: str) -> dict[str, str]:
    """``"x_ptr:*fp32, n:i32:16"`` -> ``{"x_ptr": "*fp32", "n": "i32:16"}``; raises ``UsageError``."""
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, ty = item.partition(":")
        name, ty = name.strip(), ty.strip().replace(" ", "")
        if not sep or not name.isidentifier() or not ty:
            raise UsageError(f"malformed signature entry {item!r}; write {_SIGNATURE_SYNTAX}.")
        if name in out:
            raise UsageError(f"signature gives {name!r} twice.")
        out[name] = ty
    if not out:
        raise UsageError(f"empty signature; write {_SIGNATURE_SYNTAX}.")
    return out


def parse_constexprs(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["BLOCK=1024", "ACT=relu"]`` (the ``-D`` options) -> ``{"BLOCK": "1024", "ACT": "relu"}``; values stay
    strings until ``compile_triton`` converts them by the parameter's default or by literal parsing."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise UsageError(f"malformed constexpr {item!r}; write NAME=VALUE, such as BLOCK=1024.")
        out[name] = value.strip()
    return out


def _convert_value(name: str, value: Any, default: Any) -> Any:
    """A constexpr value from the command line arrives as a string: make it what the kernel expects."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    low = text.lower()
    kind = type(default) if default is not inspect.Parameter.empty and default is not None else None
    if kind is bool or (kind is None and low in ("true", "false")):
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise UsageError(f"constexpr {name}={value!r}: expected true or false.")
    if kind is int:
        try:
            return int(text, 0)
        except ValueError:
            raise UsageError(f"constexpr {name}={value!r}: expected an integer (its default is {default!r}).") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise UsageError(f"constexpr {name}={value!r}: expected a number (its default is {default!r}).") from None
    if kind is str:
        return text
    if low.startswith(("tl.", "triton.language.")):
        import triton.language as tl

        attr = getattr(tl, low.rsplit(".", 1)[1], None)
        if isinstance(attr, tl.dtype):
            return attr
        raise UsageError(f"constexpr {name}={value!r}: triton.language has no dtype by that name.")
    if low == "none":
        return None
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text   # a bare word: a string constexpr (an activation name, say)
    if isinstance(parsed, (int, float, str, bool)):
        return parsed
    raise UsageError(f"constexpr {name}={value!r}: expected a number, true/false, or a string.")


def _split_type(name: str, ty: str) -> tuple[str, int | None]:
    """``"*fp32:16"`` -> ("*fp32", 16). Validates the type against Triton's names."""
    base, _, hint = ty.partition(":")
    base = base.strip()
    core = base[2:] if base.startswith("*k") else base.lstrip("*")
    if core not in _SCALAR_TYPES and not base.startswith(("tensordesc", "nvTmaDesc")):
        raise UsageError(
            f"parameter {name}: unknown Triton type {base!r}; use one of {', '.join(sorted(_SCALAR_TYPES))}, "
            "with a leading * for a pointer.")
    if not hint:
        return base, None
    if hint not in ("1", "16"):
        raise UsageError(f"parameter {name}: divisibility hint {hint!r} must be 16 (a multiple of 16) or 1 (none).")
    if not (base.startswith("*") or core[0] in "iu"):
        raise UsageError(f"parameter {name}: a divisibility hint applies to pointers and integers, not {base}.")
    return base, int(hint)


# --------------------------------------------------------------------------------------------------
# Loading the file


_counter = itertools.count()


def _split_spec(spec: str) -> tuple[Path, str]:
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name.isidentifier():
        raise UsageError(f"kernel spec {spec!r} must be path/to/file.py:kernel_name.")
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise UsageError(f"{path}: no such file (from the kernel spec {spec!r}).")
    return path.resolve(), name


def _unwrap(obj: Any) -> tuple[Any, list[Any]]:
    """Follow ``.fn`` through triton.autotune / triton.heuristics wrappers to the JITFunction."""
    from triton.runtime.jit import JITFunction

    wrappers = []
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn") and len(wrappers) < 8:
        wrappers.append(obj)
        obj = obj.fn
    return (obj if isinstance(obj, JITFunction) else None), wrappers


def list_jit_kernels(module: Any) -> list[str]:
    """Names of the module's Triton JIT functions (kernels and @jit helpers alike), in file order."""
    names = []
    for name, value in vars(module).items():
        fn, _ = _unwrap(value)
        if fn is not None and getattr(fn, "__module__", module.__name__) == module.__name__:
            names.append(name)
    return names


def _import_file(path: Path) -> Any:
    """Import ``path`` as a fresh module with a unique name, its directory on sys.path while it runs (and a
    variant's start file's, variant_origin.py)."""
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    mod_name = f"_kpilot_triton_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{digest}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: cannot be imported as Python (is it a .py file?).")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module   # dataclasses, pickling and Triton's source lookup want it registered
    try:
        with importable_beside(path, module):
            spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(mod_name, None)
        raise UsageError(f"{path}:{e.lineno}: syntax error: {e.msg}.") from None
    except _DriverUnavailable as e:
        sys.modules.pop(mod_name, None)
        raise UsageError(f"{path} uses the GPU driver while it is imported ({e.what}), which offline "
                         "compilation cannot provide; move that code under `if __name__ == \"__main__\":`.") from None
    except BaseException as e:   # an import of a user file can raise anything, SystemExit included
        sys.modules.pop(mod_name, None)
        if isinstance(e, KeyboardInterrupt):
            raise
        line = _line_in(e, path)
        where = f"{path}:{line}" if line else str(path)
        raise UsageError(f"{where}: importing the file failed: {type(e).__name__}: {e}".rstrip() + ".") from None
    return module


def _line_in(exc: BaseException, path: Path) -> int | None:
    tb, line = exc.__traceback__, None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


# --------------------------------------------------------------------------------------------------
# An offline stand-in for Triton's active driver


class _DriverUnavailable(RuntimeError):
    def __init__(self, what: str) -> None:
        super().__init__(f"kernelpilot compiles Triton offline: the GPU driver ({what}) is not available")
        self.what = what


class _OfflineDriver:
    """Answers Triton's "what is the current target" with the target being compiled for; anything that
    needs a real GPU raises ``_DriverUnavailable`` (a RuntimeError, which ``target_info`` already expects)."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def get_current_target(self) -> Any:
        return self._target

    def get_current_device(self) -> int:
        return 0

    def is_active(self) -> bool:
        return True

    def get_active_torch_device(self) -> Any:
        # Triton's tutorials compute DEVICE at import; torch.device("cuda") names the device without
        # initializing CUDA (ROCm builds of torch call their GPUs "cuda" too).
        try:
            import torch
        except ImportError:
            raise _DriverUnavailable("get_active_torch_device without torch") from None
        return torch.device("cuda", 0)

    def get_benchmarker(self) -> Any:
        # Triton 3.2's triton.autotune asks for the benchmarker when the decorator runs, i.e. at import.
        def no_bench(*args: Any, **kwargs: Any) -> Any:
            raise _DriverUnavailable("benchmarking")

        return no_bench

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _DriverUnavailable(f"driver.active.{name}")


@contextlib.contextmanager
def _offline_driver(target: Any) -> Iterator[None]:
    from triton.runtime import driver

    # Triton >= 3.5 keeps the active driver in ``_active`` behind a property that creates it on first
    # read (and fails without a GPU); 3.2 - 3.4 keep a lazy proxy in the plain attribute ``active``.
    slot = "_active" if "_active" in vars(driver) else "active"
    previous = vars(driver).get(slot)
    driver.set_active(_OfflineDriver(target))
    try:
        yield
    finally:
        setattr(driver, slot, previous)


@contextlib.contextmanager
def _captured_output(sink: list[str]) -> Iterator[None]:
    """Capture file descriptors 1 and 2 (MLIR and LLVM print diagnostics from C++; Triton prints a whole
    PTX listing to stdout when ptxas fails) so that nothing reaches our caller's stdout: `--json` output
    must stay parseable. What was captured goes to ``sink``."""
    saved: list[tuple[int, int]] = []
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
            with contextlib.suppress(Exception):
                stream.flush()
            try:
                saved.append((fd, os.dup(fd)))
                os.dup2(tmp.fileno(), fd)
            except OSError:
                pass
        try:
            with contextlib.redirect_stdout(_TextSink(tmp)), contextlib.redirect_stderr(_TextSink(tmp)):
                yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            for fd, dup in saved:
                os.dup2(dup, fd)
                os.close(dup)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace").strip()
            if text:
                sink.append(text)


class _TextSink:
    """A text stream writing into the capture file (for Python-level prints while fds are redirected)."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def write(self, s: str) -> int:
        self._raw.write(s.encode("utf-8", "replace"))
        return len(s)

    def flush(self) -> None:
        self._raw.flush()

    def isatty(self) -> bool:
        return False


# --------------------------------------------------------------------------------------------------
# The declaration in the file


def _declared(module: Any, path: Path, kernel_name: str, variant: str | None) -> tuple[dict[str, Any], str | None]:
    specs = getattr(module, SPECS_NAME, None)
    if specs is None:
        if variant:
            raise UsageError(f"{path} has no {SPECS_NAME} declaration, so there is no variant {variant!r}.")
        return {}, None
    if not isinstance(specs, dict):
        raise UsageError(f"{path}: {SPECS_NAME} must be a dict of kernel name -> spec dict (or list of them).")
    entry = specs.get(kernel_name)
    if entry is None:
        if variant:
            raise UsageError(f"{path}: {SPECS_NAME} declares nothing for {kernel_name}, so no variant {variant!r}.")
        return {}, None
    entries = entry if isinstance(entry, (list, tuple)) else [entry]
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise UsageError(f"{path}: {SPECS_NAME}[{kernel_name!r}] entries must be dicts.")
        unknown = sorted(set(e) - set(_SPEC_KEYS))
        if unknown:
            raise UsageError(f"{path}: {SPECS_NAME}[{kernel_name!r}] has unknown keys {', '.join(unknown)}; "
                             f"known: {', '.join(_SPEC_KEYS)}.")
    names = [str(e.get("name", i)) for i, e in enumerate(entries)]
    if variant is None:
        chosen = entries[0]
    else:
        if variant not in names:
            raise UsageError(f"{path}: {SPECS_NAME}[{kernel_name!r}] has no variant {variant!r}; "
                             f"it has {', '.join(names)}.")
        chosen = entries[names.index(variant)]
    name = chosen.get("name")
    return dict(chosen), (str(name) if name is not None else (None if len(entries) == 1 else names[0]))


def _as_signature(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, str):
        return parse_signature(value)
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return {k: v.replace(" ", "") for k, v in value.items()}
    raise UsageError(f"{where}: a signature is a dict of parameter name -> Triton type, or a string {_SIGNATURE_SYNTAX}.")


# --------------------------------------------------------------------------------------------------
# Compiling


def compile_triton(
    spec: str,
    *,
    arch: str,
    signature: dict[str, str] | str | None = None,
    constexprs: dict[str, object] | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    workdir: Path | None = None,
    variant: str | None = None,
    options: dict[str, Any] | None = None,
) -> TritonBuild:
    """Compile the Triton kernel ``path/to/file.py:kernel_name`` for ``arch`` (sm_80 .. sm_100, gfx90a,
    gfx942, gfx950) without a GPU, writing every stage to ``workdir`` (a new temporary directory if None).

    Raises ``UsageError`` for a missing file or kernel, an import error, or missing or malformed parameters;
    ``CompileError`` with Triton's own message when the kernel does not compile.
    """
    vendor, target_arch, warp_size = parse_arch(arch)
    try:
        import triton
        from triton.backends.compiler import GPUTarget
    except ImportError as e:
        raise ToolNotFoundError("triton", "Triton (`pip install triton`, 3.2 or newer)") from e
    path, kernel_name = _split_spec(spec)
    target = GPUTarget("cuda" if vendor == "nvidia" else "hip", target_arch, warp_size)
    log: list[str] = []
    caught: list[warnings.WarningMessage] = []

    with _offline_driver(target):
        module = _import_file(path)
        try:
            obj = getattr(module, kernel_name, None)
            fn, wrappers = _unwrap(obj)
            if fn is None:
                kernels = list_jit_kernels(module)
                has = (f"its Triton JIT functions are {', '.join(kernels)}" if kernels
                       else "it has no Triton JIT functions")
                what = (f"has no {kernel_name!r}" if obj is None
                        else f"has {kernel_name!r}, but it is not a @triton.jit function")
                raise UsageError(f"{path} {what}; {has}.")
            decl, variant_name = _declared(module, path, kernel_name, variant)
            r = _resolve(kernel_name, fn, wrappers, decl, f"{path}: {SPECS_NAME}[{kernel_name!r}]",
                         signature, constexprs, num_warps, num_stages, options)

            backend = triton.compiler.make_backend(target)
            compile_opts = dict(r.options)
            if r.num_warps is not None:
                compile_opts["num_warps"] = r.num_warps
            if r.num_stages is not None:
                compile_opts["num_stages"] = r.num_stages
            env = dict(amd_linker_env(type(backend)) or {}) if vendor == "amd" else {}
            # Every stage must be kept (TRITON_STORE_BINARY_ONLY=1 would keep only the binary).
            env["TRITON_STORE_BINARY_ONLY"] = "0"
            command = _repro_command(spec, arch, _sig_text(r.types, r.params), r.consts, r.num_warps,
                                     r.num_stages, variant, r.options)
            started = time.perf_counter()
            try:
                with _captured_output(log), warnings.catch_warnings(record=True) as caught, _env(env):
                    warnings.simplefilter("always")
                    _check_options(backend, compile_opts)
                    src = _make_source(triton, fn, r.params, r.types, r.consts, vendor, target)
                    compiled = triton.compile(src, target=target, options=compile_opts)
            except KernelpilotError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure inside Triton is this kernel not compiling
                raise CompileError("triton", command, 1, _error_text(e, module, log), source=spec) from None
            seconds = time.perf_counter() - started
        finally:
            sys.modules.pop(module.__name__, None)

    meta = _metadata_json(compiled.metadata)
    asm = {k: (v if isinstance(v, (bytes, bytearray)) else str(v)) for k, v in dict(compiled.asm).items()}
    asm = {k: bytes(v) if isinstance(v, bytearray) else v for k, v in asm.items()}
    symbol = str(meta.get("name") or kernel_name)
    n_warps = int(meta.get("num_warps") or r.num_warps or 4)
    w_size = int(meta.get("warp_size") or warp_size)
    n_stages = int(meta.get("num_stages") or r.num_stages or 0)

    out = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="kpilot-triton-"))
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{kernel_name}.{arch}" + (f".{variant_name}" if variant_name else "")
    paths: dict[str, Path] = {}
    for stage, content in asm.items():
        p = out / f"{stem}.{_EXT.get(stage, stage)}"
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
        paths[stage] = p
    paths["metadata"] = out / f"{stem}.json"
    paths["metadata"].write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")

    binary_key, asm_key = ("cubin", "ptx") if vendor == "nvidia" else ("hsaco", "amdgcn")
    for key in (binary_key, asm_key):
        if key not in asm:
            raise CompileError("triton", command, 1, f"Triton kept no {key} (stages: {', '.join(asm)}).", source=spec)

    build = TritonBuild(
        kernel_name=kernel_name, arch=arch, vendor=vendor, asm=asm, metadata=meta,
        num_warps=n_warps, num_stages=n_stages, warp_size=w_size, block_size=n_warps * w_size,
        signature={n: _effective_type(t, h) for n, (t, h) in r.types.items()},
        constexprs=r.consts, symbol=symbol, binary_arch=str(target_arch), source=spec, workdir=out,
        binary_path=paths[binary_key], asm_path=paths[asm_key], paths=paths, variant=variant_name,
        triton_version=triton.__version__, compile_seconds=seconds, notes=r.notes,
        warnings=[f"{w.category.__name__}: {w.message}" for w in caught if not _notice(str(w.message))] + log,
    )
    if vendor == "nvidia":
        _ptxas_report(build, backend, target_arch)
    return build


@dataclass
class _Resolved:
    params: list[Any]                          # Triton's KernelParam list, in order
    types: dict[str, tuple[str, int | None]]   # runtime parameter -> (Triton type, divisibility hint)
    consts: dict[str, Any]                     # constexpr (or specialized) parameter -> value
    num_warps: int | None
    num_stages: int | None
    options: dict[str, Any]
    notes: list[str]


def _default(p: Any) -> Any:
    param = getattr(p, "_param", None)
    return param.default if param is not None else inspect.Parameter.empty


def _resolve(kernel_name: str, fn: Any, wrappers: list[Any], decl: dict[str, Any], where: str,
             signature: dict[str, str] | str | None, constexprs: dict[str, object] | None,
             num_warps: int | None, num_stages: int | None, options: dict[str, Any] | None) -> _Resolved:
    """Merge, in order of precedence: the arguments, the file's declaration, the first autotune config,
    the parameters' annotations and defaults. Raise ``UsageError`` naming whatever is still missing."""
    sig = _as_signature(decl.get("signature"), where)
    sig.update(_as_signature(signature, "signature"))
    consts: dict[str, Any] = dict(decl.get("constexprs") or {})
    consts.update(constexprs or {})
    opts: dict[str, Any] = dict(decl.get("options") or {})
    opts.update(options or {})
    warps = num_warps if num_warps is not None else decl.get("num_warps")
    stages = num_stages if num_stages is not None else decl.get("num_stages")
    notes: list[str] = []

    params = list(fn.params)
    by_name = {p.name: p for p in params}
    unknown = sorted({n for n in list(sig) + list(consts) if n not in by_name})
    if unknown:
        raise UsageError(f"{kernel_name} has no parameter named {', '.join(unknown)}; "
                         f"its parameters are {', '.join(by_name)}.")

    autotune = next((w for w in wrappers if getattr(w, "configs", None)), None)
    if autotune is not None:
        cfg = autotune.configs[0]
        taken = []
        for k, v in (getattr(cfg, "kwargs", None) or {}).items():
            if k in by_name and k not in consts:
                consts[k] = v
                taken.append(k)
        if warps is None and getattr(cfg, "num_warps", None):
            warps = cfg.num_warps
            taken.append("num_warps")
        if stages is None and getattr(cfg, "num_stages", None):
            stages = cfg.num_stages
            taken.append("num_stages")
        for k in ("num_ctas", "maxnreg"):
            v = getattr(cfg, k, None)
            if v is not None and k not in opts and not (k == "num_ctas" and v == 1):
                opts[k] = v
                taken.append(k)
        if taken:
            notes.append(f"{', '.join(taken)} taken from the first of {len(autotune.configs)} "
                         "triton.autotune configs.")
    heuristic: set[str] = set()
    for w in wrappers:
        heuristic.update(getattr(w, "values", None) or {})

    missing_types, missing_values = [], []
    for p in params:
        default = _default(p)
        if p.is_constexpr:
            if p.name in sig:
                if sig[p.name] != "constexpr":
                    raise UsageError(f"{p.name} is a tl.constexpr parameter: give its value as a constexpr "
                                     f"(-D {p.name}=...), not a type in the signature.")
                del sig[p.name]
            if p.name not in consts:
                if default is not inspect.Parameter.empty:
                    consts[p.name] = default
                else:
                    missing_values.append(p.name)
        elif p.name in consts:
            sig.pop(p.name, None)   # a runtime parameter specialized to a constant, as Triton can
        elif p.name not in sig:
            ann = getattr(p, "annotation_type", "") or ""   # `n: tl.int32` (Triton 3.3+)
            if ann:
                sig[p.name] = ann
            elif default is None or isinstance(default, bool):
                consts[p.name] = default   # Triton specializes None and bool arguments
            elif isinstance(default, int):
                sig[p.name] = "i32"
            elif isinstance(default, float):
                sig[p.name] = "fp32"
            else:
                missing_types.append(p.name)
    if missing_types or missing_values:
        parts = []
        if missing_types:
            parts.append(f"the types of {', '.join(missing_types)} (--signature '"
                         + ",".join(f"{n}:TYPE" for n in missing_types) + "')")
        if missing_values:
            named = [n + (" (set by @triton.heuristics at launch)" if n in heuristic else "") for n in missing_values]
            parts.append(f"the tl.constexpr values of {', '.join(named)} ("
                         + " ".join(f"-D {n}=VALUE" for n in missing_values) + ")")
        raise UsageError(
            f"{kernel_name} needs " + " and ".join(parts) + "; give them on the command line or declare them "
            f"in the file: {SPECS_NAME} = {{{kernel_name!r}: {{'signature': {{...}}, 'constexprs': {{...}}}}}}.")

    consts = {n: _convert_value(n, v, _default(by_name[n])) for n, v in consts.items()}
    types = {n: _split_type(n, t) for n, t in sig.items()}
    if warps is not None:
        warps = _positive_int("num_warps", warps)
        if warps & (warps - 1):
            raise UsageError(f"num_warps={warps} must be a power of two.")
    if stages is not None:
        stages = _positive_int("num_stages", stages)
    return _Resolved(params, types, consts, warps, stages, opts, notes)


_EXT = {"amdgcn": "s", "source": "source.ttir"}


def _sig_text(types: dict[str, tuple[str, int | None]], params: list[Any]) -> str:
    order = [p.name for p in params if p.name in types]
    return ",".join(f"{n}:{types[n][0]}" + (f":{types[n][1]}" if types[n][1] else "") for n in order)


def _effective_type(base: str, hint: int | None) -> str:
    """The type with the divisibility the kernel was compiled with: pointers ``:16`` unless told ``:1``."""
    if base.startswith("*"):
        return f"{base}:{1 if hint == 1 else 16}"
    return f"{base}:16" if hint == 16 else base


def _positive_int(name: str, value: Any) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a positive integer, not {value!r}.") from None
    if v <= 0 or (isinstance(value, float) and v != value):
        raise UsageError(f"{name} must be a positive integer, not {value!r}.")
    return v


def _check_options(backend: Any, opts: dict[str, Any]) -> None:
    """Triton ignores option names it does not know; say so instead of compiling something else."""
    if not opts:
        return
    try:
        known = {f.name for f in dataclasses.fields(type(backend.parse_options({})))}
    except Exception:  # noqa: BLE001 - only a courtesy check
        return
    unknown = sorted(set(opts) - known)
    if unknown:
        raise UsageError(f"unknown Triton compile option {', '.join(unknown)} for this target; "
                         f"known: {', '.join(sorted(known))}.")


def _make_source(triton: Any, fn: Any, params: list[Any], types: dict[str, tuple[str, int | None]],
                 consts: dict[str, Any], vendor: str, target: Any) -> Any:
    """Build Triton's ASTSource, whose arguments changed between versions:

    - 3.2: ``ASTSource(fn, signature, constants, attrs)``; the signature holds only runtime parameters,
      ``constants`` maps names to values, ``attrs`` is an ``AttrsDescriptor`` of parameter indices.
    - 3.3 and later: ``ASTSource(fn, signature, constexprs, attrs)``; the signature lists every parameter,
      constants typed ``"constexpr"``, with values in ``constexprs`` (by name or index path), and ``attrs`` maps
      an index path ``(i,)`` to ``[["tt.divisibility", 16], ...]`` as the backend's ``parse_attr`` makes them.
    """
    ASTSource = triton.compiler.ASTSource
    backend = triton.compiler.make_backend(target)
    # The specialization letters a real launch gives: D = divisible by 16; S = within 2 GB (AMD buffer ops).
    amd_range = vendor == "amd" and _amd_buffer_ops()
    letters: dict[int, str] = {}
    for i, p in enumerate(params):
        if p.name not in types:
            continue
        base, hint = types[p.name]
        pointer = base.startswith("*")
        div = hint == 16 or (hint is None and pointer)
        s = ("D" if div else "") + ("S" if pointer and amd_range else "")
        if s:
            letters[i] = s

    if "constants" in inspect.signature(ASTSource.__init__).parameters:   # Triton 3.2
        signature = {p.name: types[p.name][0] for p in params if p.name in types}
        desc_cls = type(backend.get_attrs_descriptor([], []))
        attrs = desc_cls()
        props = attrs.property_values
        attrs.arg_properties = {name: [] for name in props}
        if "tt.divisibility" in props:
            attrs.arg_properties["tt.divisibility"] = [i for i, s in letters.items() if "D" in s]
        if "tt.pointer_range" in props:
            attrs.arg_properties["tt.pointer_range"] = [i for i, s in letters.items() if "S" in s]
        attrs._init_slots()
        return ASTSource(fn=fn, signature=signature, constants=dict(consts), attrs=attrs)

    signature = {p.name: ("constexpr" if p.name in consts else types[p.name][0]) for p in params}
    parse_attr = getattr(backend, "parse_attr", None)
    attrs = {}
    for i, s in letters.items():
        attrs[(i,)] = parse_attr(s) if parse_attr else ([["tt.divisibility", 16]] if "D" in s else [])
    return ASTSource(fn=fn, signature=signature, constexprs=dict(consts), attrs=attrs)


def amd_linker_env(backend_cls: Any) -> dict[str, str] | None:
    """What Triton's AMD backend (``backend_cls``) needs in the environment to link a code object: None
    when it links in-process or finds its own ld.lld, else ``TRITON_HIP_LLD_PATH`` naming one found here.

    Triton up to 3.4 links the AMD code object with an external ld.lld (ROCm's or LLVM's), found only
    at TRITON_HIP_LLD_PATH, in the wheel, /opt/rocm or /usr/bin/ld.lld; later versions link in-process.
    Where Triton would not find one, point it at a versioned LLVM lld (Debian's lld-19: ld.lld-19).
    Raises ``ToolNotFoundError`` when there is none; `kpilot doctor` asks the same question."""
    finder = getattr(backend_cls, "path_to_rocm_lld", None)
    if finder is None:
        return None
    try:
        finder()
        return None
    except Exception:  # noqa: BLE001 - Triton raises a bare Exception when it finds none
        pass
    candidates = [shutil.which(f"ld.lld-{v}") for v in ("21", "20", "19", "18", "17")]
    candidates += [f"/usr/lib/llvm-{v}/bin/ld.lld" for v in ("21", "20", "19", "18", "17")]
    candidates += [os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "llvm", "bin", "ld.lld")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return {"TRITON_HIP_LLD_PATH": c}
    raise ToolNotFoundError(
        "ld.lld", "LLVM's lld (on Debian `apt-get install lld-19`) or ROCm; this Triton links AMD code "
        "objects with it (Triton 3.5 and later need none), or set TRITON_HIP_LLD_PATH")


@contextlib.contextmanager
def _env(values: dict[str, str] | None) -> Iterator[None]:
    if not values:
        yield
        return
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _amd_buffer_ops() -> bool:
    """Whether a real launch on AMD would mark tensors under 2 GB for buffer loads (Triton's knob)."""
    try:
        from triton import knobs

        return bool(knobs.amd.use_buffer_ops)
    except (ImportError, AttributeError):
        return True   # Triton 3.2 always computes the pointer-range attribute


def _metadata_json(md: Any) -> dict[str, Any]:
    raw = md._asdict() if hasattr(md, "_asdict") else dict(vars(md))
    return {k: _jsonable(v) for k, v in sorted(raw.items())}


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "backend") and hasattr(v, "arch") and hasattr(v, "warp_size"):   # GPUTarget
        return {"backend": v.backend, "arch": v.arch, "warp_size": v.warp_size}
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return f"<{len(v)} bytes>"
    return str(v)


def _repro_command(spec: str, arch: str, sig: str, consts: dict[str, Any], warps: int | None,
                   stages: int | None, variant: str | None, opts: dict[str, Any]) -> list[str]:
    """A command that reproduces the compile: the same call of this module, as ``python -c``."""
    args = [_py(spec), f"arch={_py(arch)}", f"signature={_py(sig)}", f"constexprs={_py(consts)}"]
    if warps is not None:
        args.append(f"num_warps={warps}")
    if stages is not None:
        args.append(f"num_stages={stages}")
    if variant is not None:
        args.append(f"variant={_py(variant)}")
    if opts:
        args.append(f"options={_py(opts)}")
    code = ("from kernelpilot.toolchain.triton_compile import compile_triton; "
            f"print(compile_triton({', '.join(args)}).binary_path)")
    return [Path(sys.executable).name, "-c", code]


def _py(v: Any) -> str:
    """Python source for a value, strings in double quotes so that the shell line needs no escapes."""
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_py(k)}: {_py(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (bool, int, float)) or v is None:
        return repr(v)
    return json.dumps(str(v))   # a tl.dtype and the like: its name, which -D accepts back


def _error_text(e: BaseException, module: Any, log: list[str]) -> str:
    """Triton's own message without a traceback: for a front-end error, each frame of the chain that is in
    the user's file (file:line:col, the line, a caret), then the error itself; for a failure further down
    (MLIR passes, LLVM, ptxas), the exception and what the C++ side printed."""
    from triton.compiler.errors import CompilationError

    chain: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and len(chain) < 32:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    lines: list[str] = []
    frames = [c for c in chain if isinstance(c, CompilationError)]
    for i, c in enumerate(frames):
        where = _absolute_line(c, module)
        if where is None and i > 0:
            continue   # a frame inside Triton's own library code (tl.zeros and the like)
        excerpt = _excerpt(c)
        lines.append(where or (f"at {c.node.lineno}:{c.node.col_offset}:" if hasattr(c.node, "lineno") else ""))
        if excerpt:
            lines.append(excerpt)
    root = chain[-1]
    if isinstance(root, CompilationError):
        message = root.error_message or ""
    else:
        message = f"{type(root).__name__}: {root}".rstrip(": ")
    if frames and not isinstance(root, CompilationError):
        # Triton stores repr(inner) as the innermost frame's message; the root exception says it plainly.
        message = f"{type(root).__name__}: {root}".rstrip(": ")
    elif not frames:
        message = f"{type(e).__name__}: {e}".rstrip(": ")
    if message:
        lines.append(message)
    captured = "\n".join(log).strip()
    # When ptxas fails Triton prints the whole PTX between two rules of '='; the error already says why.
    captured = re.sub(r"={40,}\n.*?={40,}\s*(please share the reproducer above with Triton project\.?)?", "",
                      captured, flags=re.S).strip()
    if captured:
        lines.append(_trim(captured))
    return "\n".join(l for l in lines if l)


def _excerpt(e: Any) -> str:
    node, src = getattr(e, "node", None), getattr(e, "src", None)
    if node is None or src is None or not hasattr(node, "lineno"):
        return ""
    src_lines = src.split("\n")
    if not 0 < node.lineno <= len(src_lines):
        return ""
    return src_lines[node.lineno - 1] + "\n" + " " * node.col_offset + "^"


def _absolute_line(e: Any, module: Any) -> str | None:
    """CompilationError counts lines from the start of the function's source (decorators included); find
    which JIT function of the file it is about and turn that into file:line:col."""
    node, src = getattr(e, "node", None), getattr(e, "src", None)
    if node is None or not hasattr(node, "lineno") or src is None:
        return None
    for value in vars(module).values():
        fn, _ = _unwrap(value)
        if fn is None or getattr(fn, "src", None) != src:
            continue
        code = getattr(getattr(fn, "fn", None), "__code__", None)
        if code is None:
            return None
        # Triton 3.9 drops the decorators from ``src``, earlier versions keep them: find the file line
        # that holds the first line of ``src``, at or after where the function's source starts.
        start = getattr(fn, "starting_line_number", None) or code.co_firstlineno
        first = next((l.strip() for l in src.splitlines() if l.strip()), "")
        file_lines = linecache.getlines(code.co_filename)
        begin = next((i + 1 for i in range(max(start - 1, 0), len(file_lines)) if file_lines[i].strip() == first), start)
        return f"{code.co_filename}:{begin + node.lineno - 1}:{node.col_offset + 1}: in {fn.__name__}"
    return None


def _trim(text: str, limit: int = 6000) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


# --------------------------------------------------------------------------------------------------
# ptxas -v: the compiler's own resource report for this build


def _triton_ptxas(backend: Any, capability: int) -> str | None:
    """The ptxas Triton itself runs for this capability. Its PTX ISA version follows that ptxas (Triton 3.9
    with its ptxas 13.x writes `.version 9.4`), which an older CUDA toolkit's ptxas rejects."""
    # The backend's module globals: Triton 3.2 loads backends under a bare name ("nvidia") that is not
    # in sys.modules, so go through a function of the class.
    scope = getattr(type(backend).make_cubin, "__globals__", {})
    get = scope.get("get_ptxas")
    for call in ((lambda: get(capability)), (lambda: get())):   # 3.6+: get_ptxas(arch); 3.3-3.5: get_ptxas()
        if get is None:
            break
        try:
            tool = call()
            return str(getattr(tool, "path", tool))
        except TypeError:
            continue
        except Exception:  # noqa: BLE001
            break
    binpath = scope.get("_path_to_binary")   # Triton 3.2
    if binpath is not None:
        with contextlib.suppress(Exception):
            return str(binpath("ptxas")[0])
    return None


# Warnings Triton gives on every compile that say nothing about the kernel: Triton 3.9's notice that the default
# of TRITON_DEFAULT_FP_FUSION will change (whether fusion was on is in the build's metadata, enable_fp_fusion).
_NOTICES = ("TRITON_DEFAULT_FP_FUSION is unset",)


def _notice(message: str) -> bool:
    return any(n in message for n in _NOTICES)


def _ptxas_options(backend: Any, meta: dict[str, Any]) -> list[str]:
    """The options Triton's ``make_cubin`` passes besides the input, output and --gpu-name."""
    env = os.environ.get
    try:
        from triton import knobs

        no_line_info = bool(knobs.compilation.disable_line_info)
        no_opt = bool(knobs.nvidia.disable_ptxas_opt)
    except (ImportError, AttributeError):
        no_line_info = bool(env("TRITON_DISABLE_LINE_INFO"))
        no_opt = env("DISABLE_PTXAS_OPT", "0") == "1"
    try:
        make_cubin_src = inspect.getsource(type(backend).make_cubin)
    except (OSError, TypeError):
        make_cubin_src = ""
    opts: list[str] = []
    if no_line_info:
        opts += ["-lineinfo", "-suppress-debug-info"] if "suppress-debug-info" in make_cubin_src else []
    elif no_opt and '"-g"' in make_cubin_src:
        opts += ["-g"]
    else:
        opts += ["-lineinfo"]
    if meta.get("enable_fp_fusion") is False:
        opts.append("--fmad=false")
    opts.append("-v")
    if no_opt:
        opts += ["--opt-level", "0"]
    # Workarounds Triton adds for particular ptxas releases (3.9: --regAllocOptLevel=2) change register
    # allocation, so the report must use them too: take them from the installed Triton's make_cubin.
    opts += sorted(set(re.findall(r"""['"](--regAllocOptLevel=\d+)['"]""", make_cubin_src)))
    if meta.get("ptx_options"):
        opts += str(meta["ptx_options"]).split()
    return opts


def _ptxas_report(build: TritonBuild, backend: Any, capability: int) -> None:
    from kernelpilot.toolchain.find import find_tool
    from kernelpilot.toolchain.run import run_tool

    ptx = build.asm["ptx"]
    assert isinstance(ptx, str)
    m = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M)
    gpu_name = m.group(1) if m else f"sm_{capability}" + ("a" if capability >= 90 else "")
    build.binary_arch = gpu_name
    ptxas = None if os.environ.get("KPILOT_PTXAS") else _triton_ptxas(backend, capability)
    if not ptxas or not Path(ptxas).is_file():
        try:
            ptxas = str(find_tool("ptxas"))
        except ToolNotFoundError as e:
            build.notes.append(f"no ptxas report: {e}")
            return
    ptx_path = build.paths["ptx"]
    out = build.workdir / f"{ptx_path.stem}.ptxas.cubin"
    cmd = [ptxas, *_ptxas_options(backend, build.metadata), f"--gpu-name={gpu_name}", str(ptx_path), "-o", str(out)]
    build.ptxas_command = cmd
    result = run_tool(cmd, tool="ptxas", check=False, timeout=600)
    if result.returncode != 0:
        build.notes.append(f"ptxas -v failed (exit code {result.returncode}): "
                           f"{(result.stderr or result.stdout).strip()[:500]} command: {shlex.join(cmd)}")
        return
    build.ptxas_report = (result.stderr + result.stdout).strip()
    report_path = build.workdir / f"{ptx_path.stem}.ptxas.txt"
    report_path.write_text(build.ptxas_report + "\n")
    build.paths["ptxas_report"] = report_path
    with contextlib.suppress(OSError):
        build.ptxas_matches_cubin = out.read_bytes() == build.binary
        out.unlink()
    if build.ptxas_matches_cubin is False:
        build.notes.append("ptxas -v with Triton's options built a cubin that differs from Triton's; "
                           "the report may not match the binary exactly.")
