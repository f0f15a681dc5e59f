"""Compare two profiles of the same program (``kernelpilot.profile/1`` dicts): per kernel launch, matched by
name and by order among launches of that name, the change in time and in the numbers that decide the next
step (each side's two busiest pipes and three most executed opcodes among them), and the diagnoses resolved
and new. Launches left unmatched on both sides in equal numbers (a kernel
rewritten under a new name) are paired in launch order, and the row says so (``name_a``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError

__all__ = ["diff_profiles", "load_either"]

_FIELDS = (("duration_us", ("duration_us",)), ("waves_per_sm", ("waves_per_sm",)),
           ("registers_per_thread", ("registers_per_thread",)),
           ("achieved_occupancy_pct", ("occupancy", "achieved_pct")),
           ("theoretical_occupancy_pct", ("occupancy", "theoretical_pct")),
           ("sm_pct", ("throughput", "sm_pct")), ("memory_pct", ("throughput", "memory_pct")),
           ("dram_pct", ("throughput", "dram_pct")), ("dram_bandwidth_gbps", ("dram_bandwidth_gbps",)))


def _get(d: dict[str, Any], path: tuple[str, ...]) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _keyed(profile: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    seen: dict[str, int] = {}
    out = {}
    for k in profile.get("kernels", []):
        n = seen.get(k["name"], 0)
        seen[k["name"]] = n + 1
        out[(k["name"], n)] = k
    return out


def _busiest(row: dict[str, Any], a: dict[str, Any], b: dict[str, Any], n: int, label: str) -> None:
    """Each side's ``n`` largest entries (dicts kept largest first: pipes, opcodes), on both sides."""
    for key in dict.fromkeys([*list(a)[:n], *list(b)[:n]]):
        row["changes"][label.format(key)] = {"a": a.get(key), "b": b.get(key)}


def _row(x: dict[str, Any], y: dict[str, Any], launch: int) -> dict[str, Any]:
    row: dict[str, Any] = {"name": y["name"], "launch": launch, "changes": {}}
    if x["name"] != y["name"]:
        row["name_a"] = x["name"]
    for label, path in _FIELDS:
        va, vb = _get(x, path), _get(y, path)
        if va is not None or vb is not None:
            row["changes"][label] = {"a": va, "b": vb}
    _busiest(row, x.get("pipes") or {}, y.get("pipes") or {}, 2, "{}_pipe_pct")
    _busiest(row, x.get("opcodes") or {}, y.get("opcodes") or {}, 3, "{}_executed")
    da, db = x.get("duration_us"), y.get("duration_us")
    if da and db:
        row["speedup"] = round(da / db, 4)
    row["bound"] = {"a": x.get("bound"), "b": y.get("bound")}
    ids_a = {d["id"] for d in x.get("diagnoses", [])}
    ids_b = {d["id"] for d in y.get("diagnoses", [])}
    row["diagnoses_resolved"] = sorted(ids_a - ids_b)
    row["diagnoses_new"] = sorted(ids_b - ids_a)
    return row


def diff_profiles(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    ka, kb = _keyed(a), _keyed(b)
    rows = [_row(ka[key], kb[key], key[1]) for key in ka if key in kb]
    left_a = [key for key in ka if key not in kb]
    left_b = [key for key in kb if key not in ka]
    if left_a and len(left_a) == len(left_b):
        rows += [_row(ka[x], kb[y], y[1]) for x, y in zip(left_a, left_b)]
        left_a, left_b = [], []
    total_a = sum(k.get("duration_us") or 0 for k in a.get("kernels", []))
    total_b = sum(k.get("duration_us") or 0 for k in b.get("kernels", []))
    return {
        "schema": "kernelpilot.profile-diff/1",
        "a": a.get("source"), "b": b.get("source"),
        "total_us": {"a": round(total_a, 3), "b": round(total_b, 3)},
        "speedup": round(total_a / total_b, 4) if total_a and total_b else None,
        "kernels": rows,
        "only_in_a": [f"{n} #{i}" for (n, i) in left_a],
        "only_in_b": [f"{n} #{i}" for (n, i) in left_b],
    }


def load_either(path: str | Path) -> dict[str, Any]:
    """A profile to compare: the JSON of ``kpilot profile --json``, or a report ``load_profile`` reads."""
    from kernelpilot.profile.load import load_profile
    from kernelpilot.profile.model import SCHEMA

    p = Path(path)
    if p.suffix == ".json" and p.is_file():
        try:
            d = json.loads(p.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as e:
            raise KernelpilotError(f"{p}: not JSON (not UTF-8 text: {e.reason} at byte {e.start}).") from None
        except json.JSONDecodeError as e:
            raise KernelpilotError(f"{p}: not JSON ({e.msg}, line {e.lineno}).") from None
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise KernelpilotError(f"{p}: not a kernelpilot profile (expected \"schema\": \"{SCHEMA}\").")
        if not isinstance(d.get("kernels"), list) or not all(isinstance(k, dict) for k in d["kernels"]):
            raise KernelpilotError(f"{p}: not a kernelpilot profile (\"kernels\" must be a list of objects).")
        return d
    return load_profile(p).to_json()
