"""What a run was made with, recorded when it starts: kernelpilot's build, Python, the versions of torch and
Triton (read from their metadata, without importing them), the host, and the NVIDIA driver where there is one."""

from __future__ import annotations

import platform
import socket
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["environment"]


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _driver() -> str | None:
    try:
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    words = first.split()
    return next((w for w in words if w[:1].isdigit() and "." in w), first.strip())


def environment() -> dict[str, Any]:
    from kernelpilot import __version__

    return {"kernelpilot": __version__, "python": platform.python_version(), "torch": _version("torch"),
            "triton": _version("triton"), "host": socket.gethostname(), "nvidia_driver": _driver()}
