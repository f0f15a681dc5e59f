"""Shared test helpers. Toolchain tests skip where a compiler is missing, except in CI (CI=true),
where a missing compiler is a failure: CI installs every one of them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kernelpilot.errors import ToolNotFoundError
from kernelpilot.toolchain.find import find_tool

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
# Nsight Compute on an H200: one vector add launched with a tiny grid and a full one (see its README).
NCU_VECTORADD = FIXTURES / "ncu_vectoradd"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_tool(name: str) -> Path:
    """Return the tool's path; skip the test if it is missing (fail in CI)."""
    try:
        return find_tool(name)
    except ToolNotFoundError as e:
        if in_ci():
            pytest.fail(f"CI must have {name}: {e}")
        pytest.skip(str(e))


def json_events(text: str) -> list[dict]:
    """The JSON progress events a command printed with --json (its standard error: one object per line; lines of
    anything else there, a library's warning, are not events)."""
    import json

    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def require_module(name: str):
    """Import and return the module; skip (the whole file, where called at its top) if it is missing, fail in CI."""
    try:
        return __import__(name)
    except ImportError as e:
        if in_ci():
            pytest.fail(f"CI must have the Python module {name}: {e}")
        pytest.skip(f"{name} not installed", allow_module_level=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (just now)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium() -> str:
    """Debian's Chromium (or another Chrome) for tests that render pages; skip without one, fail in CI."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if in_ci():
        pytest.fail("CI: chromium is missing (apt-get install chromium)")
    pytest.skip("no Chromium here (apt-get install chromium)")


def rendered_dom(url: str) -> str:
    """The page at ``url`` as headless Chromium leaves it once its scripts have run."""
    import subprocess

    r = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                        "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-500:]
    return r.stdout


def has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import torch  # noqa: F401

        return bool(torch.cuda.is_available())
    except Exception:
        return False


# The files that take longest, first: pytest-xdist (make test) hands out whole files in collection order, so the
# workers then end at about the same time instead of one finishing a long file alone.
SLOW_FILES_FIRST = ("test_eval_cli.py", "test_cheats.py", "test_optimize.py", "test_sass.py", "test_optimize_llm.py",
                    "test_analyze_cli.py", "test_sealed.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))    # stable: a file's own order is kept
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
