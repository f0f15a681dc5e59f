"""A candidate's declared tuning space, and the variant files that try each point of it.

A candidate declares what may be tuned, and gives each tuned name a plain top-level assignment that its code
reads (Triton meta-parameters, launch options, or ``-D`` flags it passes to ``load_inline`` or nvcc)::

    BLOCK = 1024
    NUM_WARPS = 4
    KPILOT_TUNE = {"BLOCK": [256, 512, 1024, 2048], "NUM_WARPS": [2, 4, 8]}

A variant is the same file with those assignments' values replaced (nothing else changes), so whatever the
code does with them (a constexpr, ``num_warps=``, ``extra_cuda_cflags=[f"-DTILE={TILE}"]``) follows. Where
the file also has ``KPILOT_SPECS`` (toolchain/triton_compile.py) naming its Triton kernels, each variant can
be compiled offline and pruned before it runs (loop/prune.py).
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpilot.errors import InputFormatError
from kernelpilot.python_syntax import parse as parse_python

__all__ = ["TUNE_NAME", "TuningSpace", "read_space", "config_key"]

TUNE_NAME = "KPILOT_TUNE"


def config_key(config: dict[str, Any]) -> str:
    """A stable text key for a configuration: ``BLOCK=256,NUM_WARPS=4`` (names sorted)."""
    return ",".join(f"{k}={config[k]!r}" for k in sorted(config))


@dataclass
class TuningSpace:
    path: Path
    source: str
    params: dict[str, list[Any]]              # name -> values, as declared
    defaults: dict[str, Any]                   # name -> the value the file assigns
    spans: dict[str, tuple[int, int, int, int]]   # name -> (line, col, end line, end col) of that value

    def configs(self) -> list[dict[str, Any]]:
        """Every point of the space, in declaration order (the first name varies slowest)."""
        names = list(self.params)
        return [dict(zip(names, values)) for values in itertools.product(*(self.params[n] for n in names))]

    def variant(self, config: dict[str, Any]) -> str:
        """The file's text with each tuned assignment's value replaced by the configuration's."""
        unknown = set(config) - set(self.params)
        if unknown:
            raise ValueError(f"not in the tuning space: {sorted(unknown)}")
        lines = self.source.splitlines(keepends=True)
        # replace from the end of the file backwards, so earlier positions stay valid
        for name in sorted(config, key=lambda n: self.spans[n], reverse=True):
            line, col, end_line, end_col = self.spans[name]
            # ast's column offsets count UTF-8 bytes
            head = "".join(lines[:line - 1]) + lines[line - 1].encode()[:col].decode()
            tail = lines[end_line - 1].encode()[end_col:].decode() + "".join(lines[end_line:])
            text = head + repr(config[name]) + tail
            lines = text.splitlines(keepends=True)
        return "".join(lines)


def read_space(path: str | Path) -> TuningSpace:
    """The tuning space ``path`` declares. Raises InputFormatError when it declares none, or declares a name
    it does not assign as a plain top-level ``NAME = value``."""
    p = Path(path)
    source = p.read_text()
    try:
        tree = parse_python(source, filename=str(p))
    except SyntaxError as e:
        raise InputFormatError(str(p), f"does not parse: {e.msg} (line {e.lineno}).") from None
    tune_node = None
    assigned: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name == TUNE_NAME:
                tune_node = node.value
            else:
                assigned[name] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            assigned[node.target.id] = node.value
    if tune_node is None:
        raise InputFormatError(str(p), f"declares no tuning space: add {TUNE_NAME} = {{\"NAME\": [values, ...]}} "
                                       "and a top-level NAME = value that the code reads.")
    try:
        params = ast.literal_eval(tune_node)
    except ValueError:
        raise InputFormatError(str(p), f"{TUNE_NAME} must be a literal dict of name -> list of values.") from None
    if not isinstance(params, dict) or not params or not all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and v for k, v in params.items()):
        raise InputFormatError(str(p), f"{TUNE_NAME} must map each name to a non-empty list of values.")
    defaults: dict[str, Any] = {}
    spans: dict[str, tuple[int, int, int, int]] = {}
    for name in params:
        node = assigned.get(name)
        if node is None:
            raise InputFormatError(str(p), f"{TUNE_NAME} names {name!r}, but the file has no top-level "
                                           f"`{name} = value` for a variant to change.")
        try:
            defaults[name] = ast.literal_eval(node)
        except ValueError:
            raise InputFormatError(str(p), f"`{name} = ...` must be a literal value (a variant replaces "
                                           "it).") from None
        spans[name] = (node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0)
    return TuningSpace(path=p, source=source, params={k: list(v) for k, v in params.items()}, defaults=defaults,
                       spans=spans)
