"""GPU MODE problems (gpu-mode/reference-kernels), accepted as published: a folder with ``reference.py`` and
``task.yml``, usually with ``task.py`` (types) and ``utils.py`` (helpers reference.py imports).

    reference.py   ref_kernel(data) -> output          may write into a preallocated output inside data
                   generate_input(**params, seed) -> data
                   check_implementation(data, output) -> (ok, message) | message ("" = pass) | None | bool
    task.yml       files: [{name, source}]   source "@SUBMISSION@" is the candidate; "../utils.py" a shared file
                   lang: "py"; tests: [{size: 127, seed: 4242}, ...]; benchmarks: [...]; ranking_by: "geom"

A candidate (a submission file) defines ``custom_kernel(data)``.

What follows GPU MODE's own runner (``problems/*/eval.py``):

- Cases are ``tests`` (correctness) and ``benchmarks`` (timing). Their ``seed`` is public; GPU MODE mixes it
  with a secret seed, kernelpilot drops it and the harness supplies its own secret seeds. The published seeds
  stay in ``options["public_seeds"]`` (``{"tests": {case: seed}, "benchmarks": {...}}``).
- ``generate_input(**params, seed=seed)`` makes the data, on the device it chooses itself (usually CUDA).
- The candidate gets the data; ``check_implementation`` gets a pristine copy (GPU MODE clones the data before
  the candidate runs). Here ``check`` regenerates the data from the case's seed, so a candidate that writes
  into its inputs cannot change what it is checked against, and passes it to ``check_implementation``.
- ``ref_kernel`` runs on a deep copy of the data, since it may write into it or return an alias of it.
- Files listed in ``task.yml`` under another path (``{"name": "utils.py", "source": "../utils.py"}``) are
  importable under their listed name, as GPU MODE copies them next to each other; the problem folder stays on
  ``sys.path`` for the life of the worker, so imports done at call time work too.
"""

from __future__ import annotations

import atexit
import copy
import dataclasses
import inspect
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from kernelpilot.errors import InputFormatError, UsageError
from kernelpilot.evaluate.formats import torch_compiled
from kernelpilot.evaluate.formats.kernelbench import defined_names, exception_line, parse_source, problem_code_error
from kernelpilot.evaluate.formats.native import case_name
from kernelpilot.evaluate.problem import Case, Problem

__all__ = ["detect", "load", "runtime", "GpuModeRuntime", "GpuModeInputs", "clone_data", "normalize_check",
           "REQUIRED"]

REQUIRED = ("ref_kernel", "generate_input", "check_implementation")
_SUBMISSION = "@SUBMISSION@"
_SCALARS = (bool, int, float, str)


def _folder(path: Path) -> Path:
    return path if path.is_dir() else path.parent


def detect(path: Path) -> bool:
    folder = _folder(path)
    if not path.is_dir() and path.name != "task.yml":
        return False
    return (folder / "reference.py").is_file() and (folder / "task.yml").is_file()


def _read_yaml(yml: Path) -> Any:
    import yaml

    try:
        text = yml.read_text(errors="replace")
    except OSError as e:
        raise InputFormatError(str(yml), f"cannot read it: {e.strerror or e}.") from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = e.problem or e.context or "malformed"
        raise InputFormatError(str(yml), f"not valid YAML{where}: {what}.") from None
    except yaml.YAMLError as e:
        raise InputFormatError(str(yml), f"not valid YAML: {' '.join(str(e).split())}.") from None


def _files(raw: Any, yml: Path, folder: Path, main: str) -> tuple[dict[str, str], str]:
    """``files:`` -> ({name: source} for the problem's own files, the submission's name)."""
    if raw is None:
        return {}, "submission.py"
    if not isinstance(raw, list):
        raise InputFormatError(str(yml), "files must be a list of {name: ..., source: ...} entries.")
    out, submission = {}, "submission.py"
    for i, f in enumerate(raw):
        if not (isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("source"), str)):
            raise InputFormatError(str(yml), f"files[{i}] must be {{name: FILE, source: PATH}}, got {f!r}.")
        name, source = f["name"], f["source"]
        if "/" in name or "\\" in name or name in (".", ".."):
            raise InputFormatError(str(yml), f"files[{i}]: name {name!r} must be a plain file name.")
        if source == _SUBMISSION:
            submission = name
            continue
        if name == main:
            continue          # GPU MODE's runner (eval.py); kernelpilot runs its own harness
        if not (folder / source).is_file() and not (folder / name).is_file():
            raise InputFormatError(
                str(yml), f"files lists {name} from {source}, which is missing, and there is no {name} beside "
                          "reference.py either; copy it there from the GPU MODE repository.")
        out[name] = source
    return out, submission


def _cases(raw: Any, key: str, yml: Path) -> tuple[list[Case], dict[str, Any]]:
    """A ``tests``/``benchmarks`` list -> cases without their seeds, and the published seed of each case."""
    if not isinstance(raw, list):
        raise InputFormatError(str(yml), f"{key} must be a list of generate_input arguments such as "
                                         f"{{size: 1024, seed: 42}}, got {type(raw).__name__}.")
    cases, seeds, used = [], {}, set()
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise InputFormatError(str(yml), f"{key}[{i}] must be a mapping of generate_input arguments, "
                                             f"got {entry!r}.")
        for k, v in entry.items():
            if not (isinstance(k, str) and k.isidentifier()):
                raise InputFormatError(str(yml), f"{key}[{i}] has the key {k!r}, which is not a Python name.")
            if v is not None and not isinstance(v, _SCALARS):
                raise InputFormatError(str(yml), f"{key}[{i}].{k} is {v!r}; values must be numbers, strings or "
                                                 "booleans.")
        seed = entry.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InputFormatError(str(yml), f"{key}[{i}].seed is {seed!r}, not an integer.")
        params = {k: v for k, v in entry.items() if k != "seed"}
        base = case_name(params) or f"{key}[{i}]"
        name, n = base, 1
        while name in used:          # cases that differ only in their seed
            n += 1
            name = f"{base}#{n}"
        used.add(name)
        cases.append(Case(name=name, params=params))
        if "seed" in entry:
            seeds[name] = seed
    return cases, seeds


def load(path: Path) -> Problem:
    folder = _folder(path)
    yml, ref = folder / "task.yml", folder / "reference.py"
    data = _read_yaml(yml)
    if not isinstance(data, dict):
        raise InputFormatError(str(yml), "must be a mapping with tests, benchmarks, files, ... at the top level, "
                                         f"got {type(data).__name__}.")
    lang = data.get("lang", "py")
    if lang != "py":
        raise InputFormatError(str(yml), f"lang is {lang!r}: kernelpilot runs GPU MODE's Python problems "
                                         "(lang: py) only.")
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    files, submission = _files(data.get("files"), yml, folder, str(config.get("main", "eval.py")))
    if "tests" not in data:
        raise InputFormatError(str(yml), "has no tests: list (each entry the generate_input arguments of one "
                                         "correctness case, with its seed).")
    tests, test_seeds = _cases(data["tests"], "tests", yml)
    if not tests:
        raise InputFormatError(str(yml), "tests is empty; list at least one case.")
    benchmarks, bench_seeds = _cases(data.get("benchmarks") or [], "benchmarks", yml)

    missing = [n for n in REQUIRED if n not in defined_names(parse_source(ref))]
    if missing:
        raise InputFormatError(str(ref), f"defines no {', '.join(missing)} (a GPU MODE reference.py defines "
                                         "ref_kernel, generate_input and check_implementation).")
    options: dict[str, Any] = {
        "public_seeds": {"tests": test_seeds, "benchmarks": bench_seeds},
        "files": files,
        "submission": submission,
        "lang": lang,
        # The data may carry preallocated outputs the candidate is meant to write (fp8-mm's c, int8_quant's
        # x_q and x_s); writing into its inputs is no cheat here, as check() regenerates pristine data.
        "writable_inputs": True,
    }
    for key in ("ranking_by", "description", "templates", "test_timeout", "benchmark_timeout", "ranked_timeout"):
        if key in data:
            options[key] = data[key]
    return Problem(
        name=folder.resolve().name,
        format="gpumode",
        root=folder.resolve(),
        cases=tests,
        benchmark_cases=benchmarks,
        entry="custom_kernel",
        reference="reference.py:ref_kernel",
        options=options,
    )


# ---- worker side (imports torch and the problem's code) ----

def clone_data(obj: Any) -> Any:
    """A deep copy of the tensors inside ``obj`` (tuples, namedtuples, lists, dicts, dataclasses); other values
    are shared. Tensors keep their strides and ``requires_grad``; aliasing between two entries is not kept."""
    import torch

    if isinstance(obj, torch.Tensor):
        c = obj.detach().clone()
        return c.requires_grad_() if obj.requires_grad else c
    if isinstance(obj, tuple):
        items = [clone_data(x) for x in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [clone_data(x) for x in obj]
    if isinstance(obj, dict):
        return {k: clone_data(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        new = copy.copy(obj)
        for f in dataclasses.fields(obj):
            object.__setattr__(new, f.name, clone_data(getattr(obj, f.name)))
        return new
    return obj


def normalize_check(result: Any) -> tuple[bool, str]:
    """``check_implementation``'s answer in any of its published forms -> ``(ok, message)``.

    ``(ok, message)`` (message may be a list of lines), a message alone (empty: pass), ``None`` (pass) or a bool.
    """
    if result is None:
        return True, ""
    if isinstance(result, str):
        return (not result.strip(), result.strip())
    if isinstance(result, (tuple, list)) and len(result) == 2 and not isinstance(result[0], str):
        ok, msg = result
        if isinstance(msg, (list, tuple)):
            msg = "; ".join(str(m) for m in msg)
        msg = "" if msg is None else str(msg).strip()
        ok = bool(ok)
        return ok, msg if (ok or msg) else "check_implementation reported a mismatch"
    if isinstance(result, bool) or type(result).__name__ in ("bool_", "bool"):
        ok = bool(result)
        return ok, "" if ok else "check_implementation returned False"
    return False, (f"check_implementation returned a {type(result).__name__}, which kernelpilot cannot read "
                   "(expected (ok, message), a message, None or a bool)")


class _filled_empty:
    """While ``generate_input`` runs, ``torch.empty`` and its kin fill what they allocate (NaN for floats, the
    largest value for integers: PyTorch's deterministic mode with ``fill_uninitialized_memory``). GPU MODE's
    problems return the output buffer among the data, made with ``torch.empty`` and never written: without
    this its bytes differ from process to process, and the reference could not tell the candidate's inputs
    from others. Nondeterministic ops the generator uses only warn meanwhile."""

    def __enter__(self):
        import torch

        self.torch = torch
        self.was = torch.are_deterministic_algorithms_enabled()
        self.warn = torch.is_deterministic_algorithms_warn_only_enabled()
        self.fill = torch.utils.deterministic.fill_uninitialized_memory
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        return self

    def __exit__(self, *exc):
        self.torch.use_deterministic_algorithms(self.was, warn_only=self.warn)
        self.torch.utils.deterministic.fill_uninitialized_memory = self.fill
        return False


class GpuModeInputs(tuple):
    """``(data,)``, remembering the seed it was generated from so ``check`` can regenerate pristine data."""

    seed: int | None = None


def _takes_seed(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "seed" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _make_importable(problem: Problem) -> None:
    """Put the problem's files on ``sys.path`` for the rest of the process: the folder, and in front of it a
    folder holding the files ``task.yml`` takes from elsewhere under their listed names. Modules of the same
    names imported from another problem earlier in this process are dropped from ``sys.modules``."""
    root = problem.root
    elsewhere = {}
    for name, source in problem.options.get("files", {}).items():
        src = (root / source).resolve()
        if src.is_file() and src != (root / name).resolve():
            elsewhere[name] = src
    dirs = []
    if elsewhere:
        stage = Path(tempfile.mkdtemp(prefix=f"kpilot-gpumode-{root.name}-"))
        atexit.register(shutil.rmtree, stage, True)
        for name, src in elsewhere.items():
            shutil.copyfile(src, stage / name)
        dirs.append(stage.resolve())
    dirs.append(root)
    for d in reversed(dirs):
        if str(d) in sys.path:
            sys.path.remove(str(d))
        sys.path.insert(0, str(d))
    names = {Path(n).stem for n in problem.options.get("files", {}) if n.endswith(".py")}
    names |= {p.stem for p in root.glob("*.py")}
    for name in names - set(sys.stdlib_module_names):
        mod = sys.modules.get(name)
        file = getattr(mod, "__file__", None) if mod is not None else None
        if mod is not None and (file is None or Path(file).resolve().parent not in dirs):
            del sys.modules[name]


class GpuModeRuntime:
    def __init__(self, problem: Problem) -> None:
        from kernelpilot.evaluate.pyload import attribute, import_file

        self.problem = problem
        self.path = problem.root / "reference.py"
        _make_importable(problem)
        mod = import_file(self.path, what="reference file")
        self._ref_kernel = attribute(mod, "ref_kernel", self.path, what="reference.py")
        self._generate_input = attribute(mod, "generate_input", self.path, what="reference.py")
        self._check = attribute(mod, "check_implementation", self.path, what="reference.py")
        self._seeded = _takes_seed(self._generate_input)

    def _generate(self, case: Case, seed: int):
        import torch

        torch.manual_seed(seed)          # for generators that use the global RNG rather than their own
        kwargs = dict(case.params)
        if self._seeded:
            kwargs["seed"] = seed
        try:
            with _filled_empty():
                return self._generate_input(**kwargs)
        except Exception as e:
            args = ", ".join(f"{k}={v!r}" for k, v in case.params.items())
            raise problem_code_error(self.path, f"generate_input({args})", e) from None

    def make_inputs(self, case: Case, seed: int, device: str) -> tuple:
        """``(generate_input(**params, seed=seed),)``; the data lies where generate_input puts it."""
        inputs = GpuModeInputs((self._generate(case, seed),))
        inputs.seed = seed
        return inputs

    def reference(self, inputs: tuple, case: Case, seed: int):
        return self._ref_kernel(clone_data(inputs[0]))

    def load_candidate(self, path: Path, device: str, seed: int):
        from kernelpilot.evaluate.pyload import attribute, import_file

        mod = import_file(path, what="candidate")
        fn = attribute(mod, self.problem.entry, path, what="the candidate")
        if not callable(fn):
            raise InputFormatError(str(path), f"{self.problem.entry} is not callable.")
        return fn          # called as fn(*inputs), that is custom_kernel(data)

    def check(self, inputs: tuple, output: Any, expected: Any, case: Case) -> tuple[bool, str]:
        """The problem's ``check_implementation`` on pristine data: regenerated from the seed ``make_inputs``
        used, else (inputs made elsewhere) a copy of the given data, as the candidate may have changed it."""
        seed = getattr(inputs, "seed", None)
        data = self._generate(case, seed) if seed is not None else clone_data(inputs[0])
        try:
            result = self._check(data, output)
        except Exception as e:
            return False, f"check_implementation raised {exception_line(e)}"
        return normalize_check(result)

    def baseline(self, kind: str):
        """``ref_kernel`` as a baseline: ``eager``, or ``compile`` (torch.compile of it)."""
        if kind == "eager":
            return self._ref_kernel
        if kind == "compile":
            return torch_compiled(self._ref_kernel)
        raise UsageError(f"unknown baseline {kind!r}; known: eager, compile.")


def runtime(problem: Problem) -> GpuModeRuntime:
    return GpuModeRuntime(problem)
