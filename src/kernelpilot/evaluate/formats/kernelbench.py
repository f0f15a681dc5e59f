"""KernelBench problems (ScalingIntelligence/KernelBench), accepted as published: one ``.py`` file.

    class Model(nn.Module)        the reference: Model(*get_init_inputs())(*get_inputs())
    def get_inputs()              forward's arguments; shapes fixed by module constants (batch_size = ..., dim = ...)
    def get_init_inputs()         the constructor's arguments

A candidate file defines ``class ModelNew(nn.Module)`` with the same constructor and forward (often built with
``torch.utils.cpp_extension.load_inline`` or Triton).

Semantics follow KernelBench's own eval (``src/eval.py``: ``eval_kernel_against_ref``,
``run_and_check_correctness``, ``set_seed``):

- ``set_seed(s)`` is ``torch.manual_seed(s)`` then ``torch.cuda.manual_seed(s)``.
- Inputs and weights are made on the device (``torch.device(device)`` as the default device while
  ``get_inputs``, ``get_init_inputs`` and the constructors run): on a GPU they come from its generator, which is
  fast for inputs of many GB, and differ from KernelBench's (drawn on the CPU and moved); every process makes
  them the same way, so the reference and the candidate agree.
- Weights: ``get_init_inputs()`` is called right after ``set_seed(init_seed)``, its tensors moved to the device,
  and each model is constructed right after ``set_seed(init_seed)`` again, under ``torch.no_grad()``; Model and
  ModelNew creating the same parameters in the same order therefore get the same values. KernelBench uses its
  eval seed (42) for this; here ``init_seed`` is part of the problem (``options["init_seed"]``, 42), apart from
  the run's secret input seeds, because it only has to agree between the two models.
- Inputs: ``set_seed(seed)`` then ``get_inputs()``; tensors moved to the device, other values kept as they are.
- Reference and candidate calls run under ``torch.no_grad()``, and the reference Model's parameters do not
  require grad, so its baselines build no autograd graph either.
- Both models stay in the training mode KernelBench leaves them in (it never calls ``eval()``, so BatchNorm
  normalises with batch statistics); ``options["eval_mode"] = True`` puts both in eval mode instead.
- Tolerance: ``atol = rtol = 1e-2`` for every dtype (KernelBench v0 and v0.1, which run everything in fp32 with
  ``torch.allclose(atol=1e-2, rtol=1e-2)``). Unlike KernelBench's newest eval, inputs and weights are not cast to
  a ``precision`` dtype: the problem file's dtypes stand.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from kernelpilot.errors import InputFormatError, KernelpilotError, UsageError
from kernelpilot.evaluate.formats import torch_compiled
from kernelpilot.evaluate.problem import DEFAULT_TOLERANCES, Case, Problem, Tolerance
from kernelpilot.python_syntax import parse as parse_python

__all__ = ["detect", "load", "runtime", "KernelBenchRuntime", "defined_names", "parse_source",
           "problem_code_error", "exception_line", "REQUIRED", "INIT_SEED", "TOLERANCE"]

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
INIT_SEED = 42          # KernelBench's eval_kernel_against_ref(seed_num=42)
TOLERANCE = 1e-2        # KernelBench v0 / v0.1: torch.allclose(atol=1e-02, rtol=1e-02)


def defined_names(tree: ast.Module) -> set[str]:
    """Names a module binds at top level (functions, classes, assignments, imports), including inside top-level
    ``if``/``try``/``with`` blocks; read from the source, without running it."""
    names: set[str] = set()

    def targets(node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                targets(elt)

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    targets(t)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets(node.target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    names.add((a.asname or a.name).split(".")[0])
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for h in node.handlers:
                    visit(h.body)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(tree.body)
    return names


def parse_source(path: Path) -> ast.Module:
    """The syntax tree of a Python file; InputFormatError (one line) where it cannot be read or parsed."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise InputFormatError(str(path), f"cannot read it: {e.strerror or e}.") from None
    try:
        return parse_python(text, filename=str(path))
    except SyntaxError as e:
        raise InputFormatError(str(path), f"syntax error at line {e.lineno}: {e.msg}.") from None


def detect(path: Path) -> bool:
    """A ``.py`` file that binds any of Model, get_inputs, get_init_inputs (or ModelNew: a candidate given in
    its place), or does not parse: no other format takes a single ``.py`` file, so ``load`` reports exactly
    what is wrong with it."""
    if not (path.is_file() and path.suffix == ".py"):
        return False
    try:
        tree = parse_python(path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return True
    return bool(defined_names(tree) & {*REQUIRED, "ModelNew"})


def load(path: Path) -> Problem:
    names = defined_names(parse_source(path))
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        hint = (" It defines ModelNew: that is a candidate; pass the problem file (the one with Model)."
                if "ModelNew" in names and "Model" in missing else "")
        raise InputFormatError(
            str(path), f"not a KernelBench problem: it defines no {', '.join(missing)} (a KernelBench problem "
                       "defines class Model(nn.Module), get_inputs() and get_init_inputs())." + hint)
    tol = Tolerance(TOLERANCE, TOLERANCE)
    return Problem(
        name=path.stem,
        format="kernelbench",
        root=path.resolve(),
        cases=[Case(name=path.stem, params={})],
        # One tolerance for every dtype. Problem.tolerance_for falls back to the per-dtype defaults when this
        # table is empty, so it names each of those dtypes; default_tolerance covers the rest.
        tolerances={dtype: tol for dtype in DEFAULT_TOLERANCES},
        default_tolerance=tol,
        entry="ModelNew",
        reference=f"{path.name}:Model",
        options={"init_seed": INIT_SEED, "eval_mode": False},
    )


# ---- worker side (imports torch and the problem's code) ----

_GPU_WORDS = re.compile(r"cuda|nvidia|\bhip\b|rocm", re.IGNORECASE)


def _cuda_literal_line(path: Path) -> int | None:
    """The first line of ``path`` with a string constant naming a CUDA device ("cuda", "cuda:0")."""
    try:
        tree = parse_python(path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    lines = [n.lineno for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and re.fullmatch(r"cuda(:\d+)?", n.value)]
    return min(lines) if lines else None


def exception_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (compiler and CUDA errors run to many lines)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def problem_code_error(path: Path, what: str, exc: BaseException) -> KernelpilotError:
    """The error for the problem's own code (``what``: "get_inputs()", "generate_input(size=128)") failing:
    a one-line UsageError saying the problem needs a GPU where it failed for want of one, else an
    InputFormatError with the exception."""
    import torch

    text = exception_line(exc)
    if not torch.cuda.is_available() and _GPU_WORDS.search(text):
        line = _cuda_literal_line(path)
        where = f" (line {line} puts tensors on 'cuda')" if line else ""
        return UsageError(f"{path}: {what} needs a GPU{where}, and this machine has none ({text}).",
                          hint="Run this problem on a GPU target.")
    return InputFormatError(str(path), f"{what} failed: {text}")


def _set_seed(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)     # lazy: a no-op until CUDA initialises


def _default_device(device: str):
    """Tensors that problem code creates without naming a device are made on ``device``: inputs of many GB come
    straight from the GPU's generator (seconds on the host become milliseconds), and weights are made where
    they are used. Both models and every input generation run under it, so they agree with each other (though
    not with values drawn on the CPU)."""
    import torch

    return torch.device(device)


def _to_device(x: Any, device: str) -> Any:
    import torch

    return x.to(device) if isinstance(x, torch.Tensor) else x


def _device_of(values: tuple) -> str | None:
    import torch

    for x in values:
        if isinstance(x, torch.Tensor):
            return str(x.device)
    return None


class KernelBenchRuntime:
    def __init__(self, problem: Problem) -> None:
        from kernelpilot.evaluate.pyload import attribute, import_file

        self.problem = problem
        path = problem.root
        mod = import_file(path, what="KernelBench problem file")
        self._model_cls = attribute(mod, "Model", path, what="the problem file")
        self._get_inputs = attribute(mod, "get_inputs", path, what="the problem file")
        self._get_init_inputs = attribute(mod, "get_init_inputs", path, what="the problem file")
        self._init_seed = int(problem.options.get("init_seed", INIT_SEED))
        self._eval_mode = bool(problem.options.get("eval_mode", False))
        self._model = None                 # the reference Model, built on first use
        self._model_device: str | None = None
        self._device: str | None = None    # the device of the latest make_inputs

    def _construct(self, cls, device: str):
        """``cls(*get_init_inputs())`` on ``device`` with KernelBench's seeding, so weights match across models."""
        import torch

        _set_seed(self._init_seed)
        try:
            with _default_device(device):
                init = [_to_device(x, device) for x in self._get_init_inputs()]
        except Exception as e:
            raise problem_code_error(self.problem.root, "get_init_inputs()", e) from None
        with torch.no_grad(), _default_device(device):
            _set_seed(self._init_seed)
            model = cls(*init)
        if isinstance(model, torch.nn.Module):
            model = model.to(device)
            model.train(not self._eval_mode)
        return model

    def _reference_model(self, device: str):
        if self._model is None:
            try:
                self._model = self._construct(self._model_cls, device)
            except KernelpilotError:
                raise
            except Exception as e:
                raise problem_code_error(self.problem.root, "Model(*get_init_inputs())", e) from None
            if hasattr(self._model, "requires_grad_"):
                self._model.requires_grad_(False)     # no autograd graph, with or without no_grad
        elif device != self._model_device and hasattr(self._model, "to"):
            self._model = self._model.to(device)
        self._model_device = device
        return self._model

    def make_inputs(self, case: Case, seed: int, device: str) -> tuple:
        _set_seed(seed)
        try:
            with _default_device(device):
                raw = self._get_inputs()
        except Exception as e:
            raise problem_code_error(self.problem.root, "get_inputs()", e) from None
        if not isinstance(raw, (list, tuple)):
            raise InputFormatError(str(self.problem.root),
                                   f"get_inputs() returned a {type(raw).__name__}, not a list of forward's arguments.")
        self._device = device
        return tuple(_to_device(x, device) for x in raw)

    def reference(self, inputs: tuple, case: Case, seed: int):
        import torch

        model = self._reference_model(_device_of(inputs) or self._device or "cpu")
        with torch.no_grad():
            return model(*inputs)

    def load_candidate(self, path: Path, device: str, seed: int):
        import torch

        from kernelpilot.evaluate.pyload import attribute, import_file

        mod = import_file(path, what="candidate")
        cls = attribute(mod, self.problem.entry, path, what="the candidate")
        if not callable(cls):
            raise InputFormatError(str(path), f"{self.problem.entry} is not a class (KernelBench candidates define "
                                              "class ModelNew(nn.Module)).")
        try:
            model = self._construct(cls, device)
        except KernelpilotError:
            raise
        except Exception as e:
            raise InputFormatError(str(path), f"{self.problem.entry}(*get_init_inputs()) failed: "
                                              f"{exception_line(e)}") from None

        def candidate(*inputs):
            with torch.no_grad():
                return model(*inputs)

        candidate.model = model
        return candidate

    def baseline(self, kind: str):
        """The reference Model as a baseline: ``eager`` (the module) or ``compile`` (torch.compile of it), placed
        on the device of the first inputs it is called with (a baseline worker asks for it before any inputs)."""
        import torch

        if kind not in ("eager", "compile"):
            raise UsageError(f"unknown baseline {kind!r}; known: eager, compile.")
        ready = []

        def call(*inputs):
            if not ready:
                model = self._reference_model(_device_of(inputs) or self._device or "cpu")
                ready.append(model if kind == "eager" else torch_compiled(model))
            return ready[0](*inputs)

        return call

    def check(self, inputs, output, expected, case):
        return None


def runtime(problem: Problem) -> KernelBenchRuntime:
    return KernelBenchRuntime(problem)
