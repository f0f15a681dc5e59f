"""`kpilot doctor`: what this machine has (tools, Python modules, GPU and driver, counter permission), which
kpilot features that makes usable, and the command that fixes each one that is not.

Exit status: 0 when every core feature (ISA analysis of CUDA C++, HIP C++ and Triton for both vendors) is
usable; 1 when one is not, after printing everything. Other features never make it fail.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from kernelpilot.cli.output import Output, echo, table, warn
from kernelpilot.cli.spec import command
from kernelpilot.options import Options
from kernelpilot.toolchain.features import core_unusable, evaluate, features_using, module, tool

__all__ = ["doctor", "render", "report_json"]

SCHEMA = "kernelpilot.doctor/2"


def _used_by(key: str) -> str:
    uses = features_using(key)
    required = [f for f, req in uses if req]
    optional = [f for f, req in uses if not req]
    parts = [", ".join(required)] if required else []
    if optional:
        parts.append("optional for " + ", ".join(optional))
    return "; ".join(parts) or "-"


def render(inv, statuses) -> str:
    """The human report: tools, Python modules, GPU, counters, features, and the verdict line when all is well."""
    lines = ["Tools"]
    rows = []
    notes = []
    for name, t in inv.tools.items():
        rows.append([name, t.version or "-", _used_by(tool(name)), t.path or f"missing: install {t.install}"])
        for r in t.rejected:
            notes.append(f"  {name}: found, not usable: {r}")
    lines.append(table(rows, ["tool", "version", "for", "path"], indent=2))
    lines += notes
    lines += ["", "Python modules"]
    rows = []
    for name, m in inv.modules.items():
        state = m.version or ("broken: " + m.error if m.error else "missing")
        rows.append([name, state, _used_by(module(name))])
    lines.append(table(rows, ["module", "version", "for"], indent=2))
    lines += ["", f"GPU: {inv.gpu.describe()}", f"ncu counters: {inv.counters.describe()}",
              f"HIP headers: {inv.hip_headers or 'missing'}",
              f"Triton's AMD linker: {inv.triton_amd or 'missing (' + (inv.triton_amd_why or '') + ')'}"]
    lines += ["", "Features (doctor fails when a core one is missing)"]
    width = max(len(s.feature.id) for s in statuses)
    pad = " " * (2 + 7 + 2 + 4 + 2 + width + 2)
    for s in statuses:
        f = s.feature
        lines.append(f"  {'ok' if s.usable else 'missing':<7}  {'core' if f.core else '':<4}  {f.id:<{width}}  {f.title}")
        if not s.usable:
            lines.append(f"{pad}missing: {'; '.join(s.missing)}")
            lines.append(f"{pad}fix: {s.fix}")
    core = [s for s in statuses if s.feature.core]
    if not core_unusable(core):
        lines += ["", f"All {len(core)} core features are usable."]
    return "\n".join(lines)


def _failure(statuses) -> str | None:
    """The error line and one fix per unusable core feature, or None when every core feature is usable."""
    bad = core_unusable(statuses)
    if not bad:
        return None
    head = f"error: {len(bad)} core feature{'s' if len(bad) > 1 else ''} unusable: {', '.join(s.feature.id for s in bad)}."
    return "\n".join([head] + [f"  {s.feature.id}: {s.fix}" for s in bad])


def report_json(inv, statuses) -> dict[str, Any]:
    """The ``kernelpilot.doctor/2`` document (docs/doctor.md)."""
    ok = not core_unusable(statuses)
    doc = {"schema": SCHEMA, "ok": ok, **inv.to_json(), "features": [s.to_json() for s in statuses]}
    for name, t in doc["tools"].items():
        uses = features_using(tool(name))
        t["features"] = [f for f, required in uses if required]
        t["optional_for"] = [f for f, required in uses if not required]
    return doc


@dataclass(frozen=True, kw_only=True)
class DoctorOptions(Options):
    """None: what this machine has decides the answer."""


@command("doctor", options=DoctorOptions, help="""Check tools, Python extras, GPU and driver, and ncu's counter
    permission; say which features work. Exits 1 when a core feature (ISA analysis of CUDA C++, HIP C++ or
    Triton) is unusable, naming the command that fixes each one (with --json: the kernelpilot.doctor/2 document,
    its "ok" false).""", examples="""
    kpilot doctor
    kpilot doctor --json""")
def doctor(opts: DoctorOptions, out: Output) -> None:
    from kernelpilot.toolchain.inventory import detect

    inv = detect()
    statuses = evaluate(inv.available())
    failure = _failure(statuses)
    out.result(report_json(inv, statuses), lambda doc, paint: render(inv, statuses))
    if failure:
        if out.mode == "human":
            echo()
            warn(failure)
        sys.exit(1)
