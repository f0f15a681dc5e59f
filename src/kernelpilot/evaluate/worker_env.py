"""What a worker process is given of this process's environment, and what comes back from it cleaned.

A worker runs candidate code, which can print or save whatever its environment holds. So a worker gets an
allow-list: the variables that locate tools and libraries (PATH, the CUDA, ROCm, Triton and PyTorch settings,
the compilers' flags, locale) and nothing else; of those, any whose name says it holds a credential (KEY,
TOKEN, SECRET, PASSWORD, ...) is dropped as well. Text that comes back from a worker (its stderr, error
messages, anything stored in a result) is passed through ``redact``, which replaces the values of this
process's credential-like variables wherever they occur, in case a candidate found them another way (reading
another process's environment, a file).

Runs in the parent (no torch).
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["worker_env", "secret_values", "redact", "redact_json", "cache_dirs", "ALLOWED_NAMES", "ALLOWED_PREFIXES"]

# Variables a worker needs as they are: where programs and libraries are, language and time zone.
ALLOWED_NAMES = frozenset("""
PATH HOME USER LOGNAME SHELL LANG LANGUAGE TZ TERM LD_LIBRARY_PATH LIBRARY_PATH CPATH C_INCLUDE_PATH
CPLUS_INCLUDE_PATH PKG_CONFIG_PATH VIRTUAL_ENV CONDA_PREFIX CONDA_DEFAULT_ENV CC CXX CUDAHOSTCXX CFLAGS CXXFLAGS
LDFLAGS MAX_JOBS PYTHONHASHSEED PYTHONDONTWRITEBYTECODE PYTHONWARNINGS XDG_CACHE_HOME KPILOT_DEBUG
""".split())

# Families of settings for the GPU stack, compilers and math libraries.
ALLOWED_PREFIXES = ("LC_", "CUDA", "NVIDIA_", "NV_", "NVCC", "CUDNN", "CUBLAS", "NCCL_", "TRITON_", "TORCH",
                    "PYTORCH_", "HIP", "ROCM", "ROCR_", "HSA_", "HCC_", "AMD_", "GPU_", "OMP_", "MKL_", "OPENBLAS_",
                    "KMP_")

# A name that says its value is a credential; such a variable never reaches a worker, whatever its prefix.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE", re.IGNORECASE)
# Values shorter than this are not redacted: they would match too much ordinary text.
_MIN_SECRET_LEN = 8


def _allowed(name: str) -> bool:
    if _SECRET_NAME.search(name):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def cache_dirs(env: Mapping[str, str] | None = None) -> dict[str, Path]:
    """The caches a worker keeps between runs (compiled Triton kernels, torch extensions, torch.compile's
    code, CUDA's JIT cache), by the variable that names each: the only folders, besides its own, that a
    sandboxed worker may write. Inductor's default lies under the temporary folder, which a worker gets
    a private one of, so it is named explicitly here to stay shared."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    xdg = Path(env.get("XDG_CACHE_HOME") or home / ".cache")
    user = re.sub(r"[^\w.-]", "_", env.get("USER") or getpass.getuser())
    return {
        "TRITON_CACHE_DIR": Path(env.get("TRITON_CACHE_DIR") or home / ".triton" / "cache"),
        "TORCH_EXTENSIONS_DIR": Path(env.get("TORCH_EXTENSIONS_DIR") or xdg / "torch_extensions"),
        "TORCHINDUCTOR_CACHE_DIR": Path(env.get("TORCHINDUCTOR_CACHE_DIR")
                                        or Path(tempfile.gettempdir()) / f"torchinductor_{user}"),
        "CUDA_CACHE_PATH": Path(env.get("CUDA_CACHE_PATH") or home / ".nv" / "ComputeCache"),
        "XDG_CACHE_HOME": xdg,
    }


def _environ() -> dict[str, str]:
    """This process's environment, copied key by key: another thread may set or remove a variable meanwhile
    (pytest does, around each test), which makes iterating ``os.environ`` itself raise."""
    out = {}
    for k in list(os.environ.keys()):
        v = os.environ.get(k)
        if v is not None:
            out[k] = v
    return out


def worker_env(work_dir: Path, *, extra: Mapping[str, str] | None = None,
               env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: the allow-listed part of ``env`` (this process's by default), the caches
    named explicitly, a private temporary folder (``work_dir``), and this kernelpilot first on PYTHONPATH."""
    env = _environ() if env is None else env
    out = {k: v for k, v in env.items() if _allowed(k)}
    for name, path in cache_dirs(env).items():
        out[name] = str(path)
    out["TMPDIR"] = str(work_dir)
    src = str(Path(__file__).resolve().parents[2])   # the folder holding the kernelpilot package
    # Only this kernelpilot and the user's PYTHONPATH entries: a worker must import the same package.
    user_path = env.get("PYTHONPATH", "")
    out["PYTHONPATH"] = src + (os.pathsep + user_path if user_path else "")
    out.setdefault("PYTHONUNBUFFERED", "1")
    out.update(extra or {})
    return out


def secret_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{value: name}`` of this process's variables whose names say they hold credentials."""
    env = os.environ if env is None else env
    return {v: k for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= _MIN_SECRET_LEN}


def redact(text: str, secrets: Mapping[str, str] | None = None) -> str:
    """``text`` with every credential value of this process's environment replaced by ``[redacted NAME]``."""
    secrets = secret_values() if secrets is None else secrets
    for value, name in secrets.items():
        if value in text:
            text = text.replace(value, f"[redacted {name}]")
    return text


def redact_json(obj: Any, secrets: Mapping[str, str] | None = None) -> Any:
    """A copy of a JSON-like value with ``redact`` applied to every string in it (keys included)."""
    secrets = secret_values() if secrets is None else secrets
    if not secrets:
        return obj
    if isinstance(obj, str):
        return redact(obj, secrets)
    if isinstance(obj, list):
        return [redact_json(x, secrets) for x in obj]
    if isinstance(obj, tuple):
        return tuple(redact_json(x, secrets) for x in obj)
    if isinstance(obj, dict):
        return {redact_json(k, secrets): redact_json(v, secrets) for k, v in obj.items()}
    return obj
