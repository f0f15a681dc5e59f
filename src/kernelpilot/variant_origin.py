"""The line that ties a generated variant file to the candidate it was made from.

`kpilot optimize` writes each variant of a candidate into its run folder. Code that finds files beside itself
(``Path(__file__).parent / "kernel.cu"``, an import of a sibling module) must find them beside the start file,
so a variant file ends with one comment naming that file, and kernelpilot imports the variant as if it stood
there: its ``__file__`` is the start file's path and that file's folder is importable.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Iterator

__all__ = ["mark", "origin_of", "importable_beside"]

PREFIX = "# kpilot: a variant of "


def mark(text: str, origin: str | Path) -> str:
    """``text`` with the comment naming ``origin`` as its last line."""
    return text + ("" if text.endswith("\n") or not text else "\n") + PREFIX + str(Path(origin).resolve()) + "\n"


def origin_of(path: str | Path) -> Path | None:
    """The file the variant at ``path`` was made from, when its last line names one that exists."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    if not last.startswith(PREFIX):
        return None
    origin = Path(last[len(PREFIX):].strip())
    return origin if origin.is_file() else None


@contextmanager
def importable_beside(path: Path, mod: ModuleType) -> Iterator[None]:
    """While the file at ``path`` is imported as ``mod``: its folder on sys.path (for its siblings); for a
    variant, also its start file's folder, and ``__file__`` is the start file's path."""
    origin = origin_of(path)
    if origin is not None:
        mod.__file__ = str(origin)
    folders = [str(path.parent)] + ([str(origin.parent)] if origin is not None else [])
    added = [f for f in dict.fromkeys(folders) if f not in sys.path]
    for f in reversed(added):
        sys.path.insert(0, f)
    try:
        yield
    finally:
        for f in added:
            if f in sys.path:
                sys.path.remove(f)
