"""Nsight Compute's rule messages from its details page (``ncu --import R.ncu-rep --page details
--print-details all``, or what ``ncu`` prints while profiling): per kernel launch, in order, each rule's
kind (OPT, WRN, INF), section, estimated speedup and message."""

from __future__ import annotations

import re

from kernelpilot.profile.model import ToolRule

__all__ = ["read_rules"]

# The lines that matter, found by plain substring search (the page can run to hundreds of megabytes, nearly
# all of it tables): a launch's header ("  add(float *, int) (64, 1, 1)x(256, 1, 1), Context 1, Stream 7,
# Device 0, CC 9.0"), a section header, and the first line of a rule, whose continuation lines (indented
# ten spaces) follow it.
_HEADER = re.compile(r"  [^\s\[].*\)x\(\d+, \d+, \d+\), Context \d+, Stream \d+")
_RULE_KINDS = ("OPT", "WRN", "INF", "ERR")
_SPEEDUP = re.compile(r"^Est\. (Local )?Speedup: ([\d.]+)%\s*(.*)$", re.DOTALL)
_INDENT = " " * 10


def _starts(text: str, needle: str, prefix: str = "") -> list[int]:
    """Where lines beginning with ``prefix + needle`` begin (searching for the needle alone: fast)."""
    out = []
    i = text.find(needle)
    while i >= 0:
        start = i - len(prefix)
        if text.startswith(prefix, start) and text[start - 1] == "\n":
            out.append(start)
        i = text.find(needle, i + 1)
    return out


def _line(text: str, start: int) -> tuple[str, int]:
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    return text[start:end], end + 1


def read_rules(text: str) -> list[list[ToolRule]]:
    """One list of rules per kernel launch found in the text, in the order the launches appear."""
    text = "\n" + text
    events: list[tuple[int, str]] = []
    pos = text.find(", Context ")
    while pos >= 0:
        start = text.rfind("\n", 0, pos) + 1
        if _HEADER.match(text, start):
            events.append((start, "launch"))
        pos = text.find(", Context ", pos + 1)
    events += [(i, "section") for i in _starts(text, "Section: ", "    ")]
    for kind in _RULE_KINDS:
        events += [(i, kind) for i in _starts(text, f"{kind}  ", "    ")]
    events.sort()
    launches: list[list[ToolRule]] = []
    section = ""
    for pos, what in events:
        if what == "launch":
            launches.append([])
            section = ""
        elif what == "section":
            section = _line(text, pos + 13)[0].strip()
        elif launches:
            first, nxt = _line(text, pos + 4 + len(what))
            parts = [first]
            while text.startswith(_INDENT, nxt) and not text.startswith(" ", nxt + 10):
                more, nxt = _line(text, nxt)
                parts.append(more)
            message = " ".join(" ".join(parts).split())
            rule = ToolRule(section=section, kind=what, message=message)
            m = _SPEEDUP.match(message)
            if m:
                rule.local = bool(m.group(1))
                rule.est_speedup_pct = float(m.group(2))
                rule.message = m.group(3)
            launches[-1].append(rule)
    return launches
