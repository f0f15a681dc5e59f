"""Bytes and FLOPs per case from a problem's expressions (``"2 * rows * cols * itemsize"``), evaluated
safely: numbers, case parameters, + - * / // % **, parentheses, min/max/ceil/floor/log2."""

from __future__ import annotations

import ast
import math
from typing import Any

from kernelpilot.errors import UsageError
from kernelpilot.python_syntax import parse as parse_python

__all__ = ["ITEMSIZE", "evaluate_cost"]

ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
}
_FUNCS = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor, "log2": math.log2}
_BINOPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b,
}


def _eval(node: ast.AST, env: dict[str, Any]):
    if isinstance(node, ast.Expression):
        return _eval(node.body, env)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise KeyError(node.id)
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        return _FUNCS[node.func.id](*[_eval(a, env) for a in node.args])
    raise ValueError(f"unsupported expression element {ast.dump(node)[:60]}")


def evaluate_cost(expr: str, params: dict[str, Any]) -> float:
    """Evaluate ``expr`` with the case's parameters (``itemsize`` is the byte size of ``dtype``)."""
    env = {k: v for k, v in params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    dtype = params.get("dtype")
    if isinstance(dtype, str) and dtype.replace("torch.", "") in ITEMSIZE:
        env.setdefault("itemsize", ITEMSIZE[dtype.replace("torch.", "")])
    try:
        tree = parse_python(expr, mode="eval")
        return float(_eval(tree, env))
    except KeyError as e:
        raise UsageError(f"cost expression {expr!r} uses {e.args[0]!r}, which the case does not define "
                         f"(it has: {', '.join(sorted(env))}).") from None
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError) as e:
        raise UsageError(f"cost expression {expr!r} is not valid: {e}.") from None
