"""Import a Python file by path as a fresh module (problem and candidate files are not packages)."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

from kernelpilot.errors import InputFormatError
from kernelpilot.variant_origin import importable_beside

__all__ = ["import_file", "attribute", "MODULE_PREFIX", "imported_files"]

# The start of every such module's name in sys.modules.
MODULE_PREFIX = "kpilot_"
_counter = itertools.count()


def import_file(path: Path, *, what: str = "file") -> ModuleType:
    """Execute ``path`` as a module named uniquely; its folder is importable while it runs (for siblings)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise InputFormatError(str(path), f"{what} not found.")
    name = f"{MODULE_PREFIX}{path.stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputFormatError(str(path), f"cannot import this {what}.")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    with importable_beside(path, mod):
        try:
            spec.loader.exec_module(mod)
        except SyntaxError as e:
            raise InputFormatError(str(path), f"{what} has a syntax error at line {e.lineno}: {e.msg}.") from None
        except Exception as e:  # the file's own code failed at import
            raise InputFormatError(str(path), f"{what} failed to import: {type(e).__name__}: {e}") from None
    return mod


def attribute(mod: ModuleType, name: str, path: Path, *, what: str):
    try:
        return getattr(mod, name)
    except AttributeError:
        have = sorted(n for n in vars(mod) if not n.startswith("_"))[:30]
        raise InputFormatError(str(path), f"{what} defines no {name!r} (it has: {', '.join(have)}).") from None


def imported_files() -> tuple[str, ...]:
    """The names in sys.modules of the files imported so far."""
    return tuple(n for n in list(sys.modules) if n.startswith(MODULE_PREFIX))
