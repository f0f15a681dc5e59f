"""Nsight Compute's raw page as CSV (``ncu --import R.ncu-rep --csv --page raw``): one row per kernel launch,
one column per metric, a row of units after the header, numbers with thousands separators.

``read_raw_csv`` returns one ``RawLaunch`` per row with every numeric metric converted to base units
(microseconds for time, bytes, bytes per second, hertz); the text columns (kernel name, sizes, device)
are kept as text.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from typing import Callable

from kernelpilot.errors import InputFormatError

__all__ = ["RawLaunch", "read_raw_csv", "to_base"]

# Multipliers to the base unit of each kind. Time goes to microseconds (what every report shows).
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
            "s": 1e6, "second": 1e6}
_BYTES = re.compile(r"^([KMGTP]?)(?:i?)byte$")
_RATE = re.compile(r"^([KMGTP]?)(?:i?)byte/s(?:econd)?$")
_HZ = re.compile(r"^([kKMGT]?)hz$", re.IGNORECASE)
_PER_BLOCK = re.compile(r"^([KMGTP]?)byte/block$")

_TEXT_COLUMNS = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
                 "Grid Size", "Device", "CC"}


@dataclass
class RawLaunch:
    info: dict[str, str]                                  # the text columns (Kernel Name, Block Size, ...)
    metrics: dict[str, float] = field(default_factory=dict)   # numeric metrics in base units
    text: dict[str, str] = field(default_factory=dict)        # non-numeric metric values
    units: dict[str, str] = field(default_factory=dict)       # the base unit of each metric
    dropped: list[str] = field(default_factory=list)          # metrics whose value was infinite


def to_base(value: float, unit: str) -> tuple[float, str]:
    """A value in ncu's unit as (value, unit) in the base unit: us, byte, byte/s, hz, byte/block."""
    u = unit.strip()
    if u in _TIME_US:
        return value * _TIME_US[u], "us"
    for rx, base in ((_BYTES, "byte"), (_RATE, "byte/s"), (_PER_BLOCK, "byte/block")):
        m = rx.match(u)
        if m:
            return value * _PREFIX[m.group(1)], base
    m = _HZ.match(u)
    if m:
        return value * _PREFIX[m.group(1).upper()], "hz"
    return value, u


def _number(text: str) -> float | None:
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "nan"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def read_raw_csv(text: str, source: str = "<csv>", *, keep: Callable[[str], bool] | None = None) -> list[RawLaunch]:
    """Every launch in an ncu raw-page CSV (only the metrics ``keep`` accepts, when given). Lines that are not
    CSV (ncu's ``==PROF==`` chatter) are skipped. Raises InputFormatError when the text is not such a CSV."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if not lines:
        raise InputFormatError(source, "not an Nsight Compute CSV (no quoted CSV rows; expected the output of "
                                       "`ncu --import REPORT --csv --page raw`).")
    try:
        rows = list(csv.reader(io.StringIO("\n".join(lines))))
    except csv.Error as e:            # a field past the csv module's limit (128 KiB), a stray NUL
        raise InputFormatError(source, f"not a readable CSV ({e}).") from None
    header = rows[0]
    if "Kernel Name" not in header or "ID" not in header:
        raise InputFormatError(source, "a CSV, but not Nsight Compute's raw page (no 'ID' and 'Kernel Name' "
                                       "columns; export it with `ncu --import REPORT --csv --page raw`).")
    body = rows[1:]
    units = ["" for _ in header]
    if body and not body[0][header.index("ID")].strip():
        units = body[0] + [""] * (len(header) - len(body[0]))
        body = body[1:]
    # per column: a text column, or a metric with its factor to the base unit (worked out once)
    columns = []
    for name, unit in zip(header, units):
        if name in _TEXT_COLUMNS:
            columns.append((name, None, 1.0, ""))
        elif keep is not None and not keep(name):
            columns.append((name, False, 1.0, ""))
        else:
            factor, base = to_base(1.0, unit)
            columns.append((name, True, factor, base))
    out = []
    for row in body:
        if len(row) < len(header):
            row = row + [""] * (len(header) - len(row))
        launch = RawLaunch(info={})
        metrics, text, units_out, info = launch.metrics, launch.text, launch.units, launch.info
        for (name, metric, factor, base), cell in zip(columns, row):
            if metric is None:
                info[name] = cell
                continue
            if metric is False:
                continue
            try:
                v = float(cell)
            except ValueError:
                v = _number(cell)
                if v is None:
                    if cell.strip():
                        text[name] = cell.strip()
                    continue
            if not math.isfinite(v):      # NaN (not measured) or an infinity: no value to compute with
                if math.isinf(v):         # not how ncu says "not measured": said in the profile's notes
                    launch.dropped.append(name)
                continue
            metrics[name] = v * factor
            units_out[name] = base
        out.append(launch)
    if not out:
        raise InputFormatError(source, "an Nsight Compute CSV with no kernel launches in it.")
    return out
