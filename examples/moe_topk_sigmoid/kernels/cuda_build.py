"""How the case study's CUDA extensions are built: one translation unit per logit dtype, or per dtype and part (say,
per router), so that nvcc builds them in parallel, plus a host-only binding module, written under the PyTorch
extensions folder in a directory named by a hash of everything they hold (the kernel files included), and loaded
with torch.utils.cpp_extension on first use. A changed kernel file is a new extension; an unchanged one is built
once per machine, and a build that was killed (a benchmark cut off at its deadline) leaves nothing that stops the
next one."""

import fcntl
import hashlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DTYPES = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16"}
# nvcc options besides PyTorch's: -lineinfo lets `kpilot profile --source` map its samples to source lines (nvcc 13
# emits the same SASS with it as without).
CUDA_FLAGS = ("-O3", "-lineinfo")


def units(parts: dict[str, str] | None = None) -> dict[str, tuple[str, str | None]]:
    """The translation units' names, each with its dtype's C++ type and its part's value: one per dtype ("bf16"),
    or with ``parts`` (name -> value) one per dtype and part ("bf16_plain"), so that each builds alone."""
    if not parts:
        return {name: (ctype, None) for name, ctype in DTYPES.items()}
    return {f"{name}_{part}": (ctype, value) for name, ctype in DTYPES.items() for part, value in parts.items()}


def build_root() -> Path:
    """Where the case study's builds go, each in a folder named by a hash of its sources: PyTorch's extensions
    folder (TORCH_EXTENSIONS_DIR, else ~/.cache/torch_extensions)."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")


def sources(prefix: str, per_dtype: str, module: str, kernel_files: list[Path],
            parts: dict[str, str] | None = None) -> tuple[str, list[Path]]:
    """Write the build's sources and return (the extension's name, its files): ``per_dtype`` with DTYPE, NAME and
    (with ``parts``) UNIT_PART replaced for each unit of ``units(parts)``, and ``module``."""
    texts = {}
    for name, (ctype, value) in units(parts).items():
        text = per_dtype.replace("DTYPE", ctype).replace("NAME", name)
        texts[f"{name}.cu"] = text.replace("UNIT_PART", value) if value is not None else text
    texts["module.cpp"] = module
    digest = hashlib.sha256("".join([*texts.values(), *(f.read_text() for f in kernel_files)]).encode()).hexdigest()
    src = build_root() / f"kpilot_moe_src_{digest[:12]}"
    src.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        if not (src / name).exists():
            tmp = src / f".{name}.{os.getpid()}"
            tmp.write_text(text)
            tmp.replace(src / name)
    return f"{prefix}_{digest[:12]}", [src / "module.cpp", *(src / f"{n}.cu" for n in units(parts))]


def build_directory(name: str) -> Path:
    """Where the extension ``name`` is built: under build_root(), in a folder for this Python and CUDA (as PyTorch
    names its own), so that two installs never load each other's builds."""
    import torch

    cuda = (torch.version.cuda or "none").replace(".", "")
    return build_root() / f"py{sys.version_info.major}{sys.version_info.minor}_cu{cuda}" / name


@contextmanager
def build_lock(folder: Path) -> Iterator[None]:
    """Hold the build in ``folder`` alone, across processes, for the block. PyTorch's own lock is a file
    (folder/lock) that a build makes and removes at its end: a build killed half way leaves it behind, and every
    later load of that extension then waits on it forever. This lock is an flock, which the kernel drops with the
    process that held it; every build of ours runs under it, so a ``lock`` file found while holding it is such a
    leftover, and is removed."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.flock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        (folder / "lock").unlink(missing_ok=True)
        yield


def load(name: str, files: list[Path], kernels: Path, flags: tuple[str, ...] = CUDA_FLAGS):
    """Build (or load the build of) the extension; ``kernels``: the folder its sources include kernel files from
    (the caller's own: a variant folder's copy of the kernels includes its own files, not this module's)."""
    from torch.utils.cpp_extension import load as torch_load

    folder = build_directory(name)
    with build_lock(folder):
        return torch_load(name=name, sources=[str(s) for s in files], extra_cuda_cflags=[*flags, f"-I{kernels}"],
                          build_directory=str(folder), verbose=False)


class Extension:
    """One extension of the case study: its sources (``sources()``: the name and files, written where needed) and
    its module, built on first use (``module()``). ``kernels``: the folder of its kernel files (``files``)."""

    def __init__(self, prefix: str, per_dtype: str, module: str, kernels: Path, files: tuple[str, ...],
                 flags: tuple[str, ...] = CUDA_FLAGS, parts: dict[str, str] | None = None) -> None:
        self.prefix, self.per_dtype, self.binding, self.kernels, self.files, self.flags = (
            prefix, per_dtype, module, kernels, files, flags)
        self.parts = parts
        self._module = None

    def sources(self) -> tuple[str, list[Path]]:
        return sources(self.prefix, self.per_dtype, self.binding, [self.kernels / f for f in self.files], self.parts)

    def module(self):
        if self._module is None:
            self._module = load(*self.sources(), self.kernels, self.flags)
        return self._module


def runs_on(logits) -> bool:
    """Whether a tensor is a 2-D tensor on an NVIDIA GPU these kernels are built for (sm_80 or newer)."""
    import torch

    return (logits.is_cuda and torch.version.hip is None and logits.dim() == 2
            and torch.cuda.get_device_capability(logits.device) >= (8, 0))
