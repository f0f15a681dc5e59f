"""Static ISA analysis: parse SASS and AMDGCN into one model, analyze it, report findings.

    >>> from kernelpilot.isa import analyze
    >>> reports = analyze("kernel.cu", arch="sm_90")      # one KernelReport per kernel
    >>> reports[0].to_json()["findings"]
"""

from kernelpilot.isa.analyze import AnalyzeOptions, analyze, analyze_kernel, load_kernels
from kernelpilot.isa.diff import diff_reports
from kernelpilot.isa.model import SCHEMA, Finding, KernelISA, KernelReport

__all__ = ["analyze", "analyze_kernel", "load_kernels", "AnalyzeOptions", "diff_reports", "SCHEMA", "Finding",
           "KernelISA", "KernelReport"]
