"""The files a problem's code is made of, sealed: hashed (and kept) before any candidate code runs.

A candidate runs as the same user as the harness, so without a sandbox it could rewrite the problem's
reference before the reference's process imports it, and pass. The candidate's worker cannot write these
files where the kernel has Landlock (``landlock.py``); everywhere, the parent seals them when an evaluation
starts, every worker checks the seal before it imports problem code, and the parent checks it again once every
candidate process has ended. A changed file fails the run (``problem-tampered``) and is put back as it was.

The files: for a native problem its ``problem.toml``, the files it names (reference, inputs, check) and the
Python files beside each of those; for GPU MODE the folder's Python files, ``task.yml`` and the files it takes
from elsewhere; for KernelBench the problem file itself.

Plain stdlib (the parent needs no torch for it).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["problem_files", "Seal", "verify_seal"]

_MAX_FILES = 2000
_MAX_BYTES = 64 << 20


def _beside(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.glob("*.py") if p.is_file())


def problem_files(problem: Any) -> list[Path]:
    """The files whose contents decide what a problem computes (see the module's docstring)."""
    root = Path(problem.root)
    files: set[Path] = set()
    if problem.format == "kernelbench":
        files.add(root)
    elif problem.format == "native":
        files.add(root / "problem.toml")
        for key in ("make_inputs", "check"):
            spec = problem.options.get(key)
            if spec:
                named = (root / spec.rpartition(":")[0]).resolve()
                files.add(named)
                files.update(_beside(named))
        if ":" in problem.reference:
            named = (root / problem.reference.rpartition(":")[0]).resolve()
            files.add(named)
            files.update(_beside(named))
    elif problem.format == "gpumode":
        files.update(p for p in root.glob("*.py") if p.is_file())
        files.add(root / "task.yml")
        for source in problem.options.get("files", {}).values():
            files.add((root / source).resolve())
    return sorted(p.resolve() for p in files if p.is_file())[:_MAX_FILES]


@dataclass
class Seal:
    """The problem's files as they were: ``hashes`` (path -> sha256) to check, ``contents`` to put back."""

    hashes: dict[str, str] = field(default_factory=dict)
    contents: dict[str, bytes] = field(default_factory=dict, repr=False)

    @classmethod
    def take(cls, files: list[Path]) -> Seal:
        seal, total = cls(), 0
        for path in files:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            seal.hashes[str(path)] = hashlib.sha256(data).hexdigest()
            total += len(data)
            if total <= _MAX_BYTES:
                seal.contents[str(path)] = data
        return seal

    def changed(self) -> list[str]:
        """The sealed files that now differ (or are gone)."""
        return verify_seal(self.hashes)

    def restore(self, paths: list[str]) -> list[str]:
        """Put ``paths`` back as they were sealed; returns those that could not be."""
        failed = []
        for p in paths:
            data = self.contents.get(p)
            if data is None:
                failed.append(p)
                continue
            try:
                tmp = Path(f"{p}.kpilot-restore-{os.getpid()}")
                tmp.write_bytes(data)
                os.replace(tmp, p)
            except OSError:
                failed.append(p)
        return failed


def verify_seal(hashes: dict[str, str]) -> list[str]:
    """The files of ``hashes`` whose contents no longer hash the same (or cannot be read)."""
    changed = []
    for path, digest in hashes.items():
        try:
            now = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            now = None
        if now != digest:
            changed.append(path)
    return changed
