"""The operations kernelpilot offers to people (the CLI), programs (``--json``, the Python API) and agents (MCP,
the LLM loop), each declared once: its options class, its description and its result (``registry.py``)."""

from kernelpilot.tools import arch, docs, evaluate, files, isa, profile, runs, targets  # noqa: F401  (they register)
from kernelpilot.tools.registry import (REGISTRY, Tool, ToolArgumentError, ToolContext, call, jsonable, register,
                                        run, within)

__all__ = ["REGISTRY", "Tool", "ToolArgumentError", "ToolContext", "call", "jsonable", "register", "run", "within"]
