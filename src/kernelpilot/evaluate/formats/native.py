"""kernelpilot's own problem format: a folder with ``problem.toml``.

    name = "row_softmax"
    reference = "reference.py:softmax"          # reference(*inputs) -> output(s)
    make_inputs = "reference.py:make_inputs"    # make_inputs(case: dict, seed: int, device: str) -> tuple
    entry = "softmax"                           # what a candidate file defines (default: the reference's name)
    vary = ["rows"]                             # integer parameters a candidate must handle for any value

    [cost]                                      # optional, per case, for the roofline floor
    bytes = "2 * rows * cols * itemsize"
    flops = "5 * rows * cols"

    [tolerance]                                 # per output dtype; defaults are per dtype
    float32 = { atol = 1e-5, rtol = 1e-5 }

    [[cases]]
    name = "small"                              # optional; made from the parameters otherwise
    rows = 128
    cols = 256
    dtype = "float32"

    [[case_grid]]                               # every combination of the lists (scalars stay fixed)
    rows = [1, 1024, 65536]
    cols = 256
    dtype = ["float32", "float16"]

    check = "reference.py:check"                # optional: check(inputs, output, expected) -> (ok, message)
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from kernelpilot.errors import InputFormatError
from kernelpilot.evaluate.formats import torch_compiled
from kernelpilot.evaluate.problem import Case, Problem, Tolerance

__all__ = ["detect", "load", "runtime", "case_name", "hidden_variants"]

_KNOWN_KEYS = {"name", "reference", "make_inputs", "entry", "vary", "cost", "tolerance", "cases", "case_grid",
               "description", "seeds", "check"}


def detect(path: Path) -> bool:
    return path.is_dir() and (path / "problem.toml").is_file() or path.name == "problem.toml"


def case_name(params: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in params.items())


def hidden_variants(cases: list[Case], vary: list[str]) -> list[Case]:
    """Shape variants no public case shows: each varied integer parameter of the first case set to odd
    values (n+1 and n//2+3), so a candidate specialised to the public shapes fails."""
    if not cases or not vary:
        return []
    out, seen = [], {case_name(c.params) for c in cases}
    base = cases[0].params
    for key in vary:
        v = base.get(key)
        if not isinstance(v, int) or isinstance(v, bool):
            continue
        for nv in (v + 1, v // 2 + 3):
            p = dict(base)
            p[key] = nv
            name = case_name(p)
            if name not in seen:
                seen.add(name)
                out.append(Case(name=name, params=p, hidden=True))
    return out


def _spec(value: Any, key: str, path: Path) -> tuple[str, str]:
    if not isinstance(value, str) or ":" not in value:
        raise InputFormatError(str(path), f"{key} must be 'FILE.py:NAME', got {value!r}.")
    file, _, name = value.rpartition(":")
    if not (path.parent / file).is_file():
        raise InputFormatError(str(path), f"{key} names {file}, which is not in {path.parent}.")
    return file, name


def load(path: Path) -> Problem:
    toml = path / "problem.toml" if path.is_dir() else path
    try:
        data = tomllib.loads(toml.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputFormatError(str(toml), f"not UTF-8 text ({e.reason} at byte {e.start}).") from None
    except tomllib.TOMLDecodeError as e:
        raise InputFormatError(str(toml), f"not valid TOML: {e}.") from None
    unknown = set(data) - _KNOWN_KEYS
    if unknown:
        raise InputFormatError(str(toml), f"unknown keys {sorted(unknown)}; known: {sorted(_KNOWN_KEYS)}.")
    for key in ("reference", "make_inputs"):
        if key not in data:
            raise InputFormatError(str(toml), f"missing {key} = 'FILE.py:NAME'.")
    _spec(data["reference"], "reference", toml)
    _spec(data["make_inputs"], "make_inputs", toml)
    if "check" in data:
        _spec(data["check"], "check", toml)
    raw_cases = list(data.get("cases") or []) + _grid_cases(data.get("case_grid"), toml)
    if not raw_cases:
        raise InputFormatError(str(toml), "needs at least one [[cases]] or [[case_grid]] table.")
    cases = []
    for i, c in enumerate(raw_cases):
        if not isinstance(c, dict):
            raise InputFormatError(str(toml), f"cases[{i}] is not a table.")
        params = {k: v for k, v in c.items() if k != "name"}
        cases.append(Case(name=str(c.get("name") or case_name(params)), params=params))
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise InputFormatError(str(toml), "two cases have the same name.")
    tolerances = {}
    for dtype, t in (data.get("tolerance") or {}).items():
        if not isinstance(t, dict) or not {"atol", "rtol"} <= set(t):
            raise InputFormatError(str(toml), f"tolerance.{dtype} must be {{ atol = ..., rtol = ... }}.")
        try:
            tolerances[dtype] = Tolerance(float(t["atol"]), float(t["rtol"]))
        except (TypeError, ValueError) as e:
            raise InputFormatError(str(toml), f"tolerance.{dtype}: {e}.") from None
    vary = list(data.get("vary") or [])
    cost = {k: str(v) for k, v in (data.get("cost") or {}).items() if k in ("bytes", "flops")}
    ref_name = data["reference"].rpartition(":")[2]
    return Problem(
        name=str(data.get("name") or toml.parent.name),
        format="native",
        root=toml.parent.resolve(),
        cases=cases + hidden_variants(cases, vary),
        tolerances=tolerances,
        entry=str(data.get("entry") or ref_name),
        reference=data["reference"],
        cost=cost,
        vary=vary,
        options={"make_inputs": data["make_inputs"], **({"check": data["check"]} if "check" in data else {})},
    )


def _grid_cases(grids: Any, toml: Path) -> list[dict[str, Any]]:
    """The cases of each [[case_grid]]: every combination of its lists, in key order."""
    import itertools

    if grids is None:
        return []
    if not isinstance(grids, list) or not all(isinstance(g, dict) and g for g in grids):
        raise InputFormatError(str(toml), "each [[case_grid]] must be a table of parameter = value or [values].")
    out = []
    for g in grids:
        keys = list(g)
        values = [v if isinstance(v, list) else [v] for v in g.values()]
        if any(not v for v in values):
            raise InputFormatError(str(toml), "a [[case_grid]] list is empty.")
        out += [dict(zip(keys, combo)) for combo in itertools.product(*values)]
    return out


class NativeRuntime:
    def __init__(self, problem: Problem) -> None:
        from kernelpilot.evaluate.pyload import attribute, import_file

        self.problem = problem
        rfile, rname = problem.reference.rsplit(":", 1)
        ifile, iname = problem.options["make_inputs"].rsplit(":", 1)
        rmod = import_file(problem.root / rfile, what="reference file")
        imod = rmod if ifile == rfile else import_file(problem.root / ifile, what="input generator file")
        self._reference = attribute(rmod, rname, problem.root / rfile, what="the reference file")
        self._make_inputs = attribute(imod, iname, problem.root / ifile, what="the input generator file")
        self._check = None
        if problem.options.get("check"):
            cfile, cname = problem.options["check"].rsplit(":", 1)
            cmod = import_file(problem.root / cfile, what="check file")
            self._check = attribute(cmod, cname, problem.root / cfile, what="the check file")

    def make_inputs(self, case: Case, seed: int, device: str) -> tuple:
        out = self._make_inputs(dict(case.params), seed, device)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def reference(self, inputs: tuple, case: Case, seed: int):
        return self._reference(*inputs)

    def load_candidate(self, path: Path, device: str, seed: int):
        from kernelpilot.evaluate.pyload import attribute, import_file

        mod = import_file(path, what="candidate")
        fn = attribute(mod, self.problem.entry, path, what="the candidate")
        if not callable(fn):
            raise InputFormatError(str(path), f"{self.problem.entry} is not callable.")
        return fn

    def baseline(self, kind: str):
        """The reference itself as a baseline: ``eager`` or ``compile`` (torch.compile)."""
        if kind == "eager":
            return self._reference
        return torch_compiled(self._reference)

    def check(self, inputs, output, expected, case):
        """The problem's own check, where it has one: ``(ok, message)``; else None (the standard comparison)."""
        if self._check is None:
            return None
        ok, message = self._check(inputs, output, expected)
        return bool(ok), str(message or "")


def runtime(problem: Problem) -> NativeRuntime:
    return NativeRuntime(problem)
