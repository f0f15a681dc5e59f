"""Find and run the compilers and disassemblers; say exactly what is missing and how to get it."""

from kernelpilot.toolchain.find import find_tool, tool_versions
from kernelpilot.toolchain.run import run_tool

__all__ = ["find_tool", "run_tool", "tool_versions"]
