"""Nsight Compute's rule messages from its details page (``ncu --import R.ncu-rep --page details
--print-details all``, or what ``ncu`` prints while profiling): per kernel launch, in order, each rule's
kind (OPT, WRN, INF), section, estimated speedup and message."""

from __future__ import annotations

import re

from kernelpilot.profile.model import ToolRule

__all__ = ["read_rules"]

# "  add(float *, const float *, int) (64, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0"
_LAUNCH = re.compile(r"^  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context \d+, Stream \d+")
_SECTION = re.compile(r"^    Section: (.+?)\s*$")
_RULE = re.compile(r"^    (OPT|WRN|INF|ERR)\s{2,}(.*?)\s*$")
_SPEEDUP = re.compile(r"^Est\. (Local )?Speedup: ([\d.]+)%\s*(.*)$")
_CONTINUE = re.compile(r"^ {10}(\S.*?)\s*$")


def read_rules(text: str) -> list[list[ToolRule]]:
    """One list of rules per kernel launch found in the text, in the order the launches appear."""
    launches: list[list[ToolRule]] = []
    section = ""
    current: ToolRule | None = None

    def close() -> None:
        nonlocal current
        if current is not None:
            current.message = " ".join(current.message.split())
            if launches:
                launches[-1].append(current)
            current = None

    for line in text.splitlines():
        if _LAUNCH.match(line):
            close()
            launches.append([])
            section = ""
            continue
        m = _SECTION.match(line)
        if m:
            close()
            section = m.group(1)
            continue
        m = _RULE.match(line)
        if m:
            close()
            current = ToolRule(section=section, kind=m.group(1), message="")
            first = m.group(2)
            s = _SPEEDUP.match(first)
            if s:
                current.local = bool(s.group(1))
                current.est_speedup_pct = float(s.group(2))
                first = s.group(3)
            current.message = first
            continue
        m = _CONTINUE.match(line)
        if current is not None and m:
            current.message += " " + m.group(1)
            continue
        close()
    close()
    return launches
