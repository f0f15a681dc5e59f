"""An ``.ncu-rep`` read without the ncu binary, through NVIDIA's ``ncu_report`` module: each launch's metrics
in the form the raw page gives them (``RawLaunch``, base units) and ncu's rule results in the form the details
page gives them (``ToolRule``). `kpilot profile --import` uses this where ncu is not installed, e.g. on a
machine without a GPU reading a report made on one."""

from __future__ import annotations

import re
from typing import Any, Callable

from kernelpilot.profile.model import ToolRule
from kernelpilot.profile.ncu_csv import RawLaunch, to_base
from kernelpilot.profile.ncu_source import actions

__all__ = ["launches_from_report", "rules_from_report"]

_KIND = {1: "INF", 2: "OPT", 3: "WRN", 4: "ERR"}          # ncu_report.MsgType values
_LOCAL = 1                                                # ncu_report.SpeedupType_LOCAL
_LINK = re.compile(r"@(section|url):([^:@]*):([^@]*)@")


def _dims(action: Any, prefix: str) -> str:
    vals = []
    for axis in "xyz":
        m = action.metric_by_name(f"{prefix}_{axis}")
        vals.append(str(int(m.value())) if m is not None and m.has_value() else "1")
    return f"({', '.join(vals)})"


def launches_from_report(report: Any, *, keep: Callable[[str], bool] | None = None) -> list[RawLaunch]:
    """Every launch of the report (loaded, or its path), in order, with its metrics in base units (only those
    ``keep`` accepts)."""
    out = []
    for i, action in enumerate(actions(report)):
        launch = RawLaunch(info={"ID": str(i), "Kernel Name": action.name(action.NameBase_DEMANGLED),
                                 "Block Size": _dims(action, "launch__block_dim"),
                                 "Grid Size": _dims(action, "launch__grid_dim")})
        for name in action.metric_names():
            if keep is not None and not keep(name):
                continue
            m = action.metric_by_name(name)
            if m is None or not m.has_value():
                continue
            value = m.value()
            if isinstance(value, str):
                if value.strip():
                    launch.text[name] = value.strip()
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                continue
            launch.metrics[name], launch.units[name] = to_base(float(value), m.unit())
        out.append(launch)
    return out


def _message(text: str) -> str:
    """A rule message as the details page prints it: section links as their titles, other links as
    'title (address)'."""
    def link(m: re.Match) -> str:
        kind, title, target = m.groups()
        return target if kind == "section" else f"{title} ({target})"

    return " ".join(_LINK.sub(link, text).split())


def rules_from_report(report: Any) -> list[list[ToolRule]]:
    """ncu's rule results of each launch of the report (loaded, or its path), in order: section title, kind
    (OPT, WRN, INF), message, estimated speedup (``local`` for "Est. Local Speedup")."""
    out = []
    for action in actions(report):
        titles = {s.identifier(): s.name() for s in action.sections()}
        rules = []
        for r in action.rule_results_as_dicts():
            msg = r.get("rule_message") or {}
            kind = _KIND.get(msg.get("type"))
            if not kind or not msg.get("message"):
                continue
            rule = ToolRule(section=titles.get(r.get("section_identifier"), r.get("section_identifier") or ""),
                            kind=kind, message=_message(msg["message"]))
            est = r.get("speedup_estimation")
            if est and est.get("speedup") is not None:
                rule.est_speedup_pct = float(f"{float(est['speedup']):.4g}")   # as the details page prints it
                rule.local = est.get("type") == _LOCAL
            rules.append(rule)
        out.append(rules)
    return out
