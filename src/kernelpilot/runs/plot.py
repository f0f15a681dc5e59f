"""A PNG plot of speedup over steps, drawn and encoded with the standard library (no plotting package).

Points: each evaluated step's speedup over the start (green when it passed, red at the bottom when it failed);
a blue line: the best so far; grey: 1x (the start); orange dashes: the target. Axes: step (x), speedup (y,
from 0 to a little over the largest); light ticks at every whole speedup. The report beside it says so.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

__all__ = ["speedup_png", "series_png", "PALETTE"]

PALETTE = [(40, 90, 200), (40, 160, 60), (210, 50, 50), (240, 140, 20), (130, 60, 170), (20, 150, 160)]

_BG, _AXIS, _GRID = (255, 255, 255), (60, 60, 60), (225, 225, 225)
_OK, _BAD, _BEST, _ONE, _TARGET = (40, 160, 60), (210, 50, 50), (40, 90, 200), (150, 150, 150), (240, 140, 20)


class _Canvas:
    def __init__(self, w: int, h: int) -> None:
        self.w, self.h = w, h
        self.px = bytearray(bytes(_BG) * (w * h))

    def set(self, x: int, y: int, c: tuple[int, int, int]) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(c)

    def line(self, x0: int, y0: int, x1: int, y1: int, c, *, dash: int = 0) -> None:
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, n = dx + dy, 0
        while True:
            if not dash or (n // dash) % 2 == 0:
                self.set(x0, y0, c)
            n += 1
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def dot(self, x: int, y: int, c, r: int = 3) -> None:
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                if dx * dx + dy * dy <= r * r:
                    self.set(x + dx, y + dy, c)

    def cross(self, x: int, y: int, c, r: int = 3) -> None:
        self.line(x - r, y - r, x + r, y + r, c)
        self.line(x - r, y + r, x + r, y - r, c)

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[3 * y * self.w: 3 * (y + 1) * self.w]) for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def speedup_png(points: list[tuple[int, float | None]], path: Path, *, target: float | None = None,
                width: int = 720, height: int = 360) -> Path:
    """Draw ``points`` (step, speedup or None for a failed step) into ``path``."""
    c = _Canvas(width, height)
    left, right, top, bottom = 40, width - 15, 15, height - 30
    steps = [s for s, _ in points] or [0]
    top_value = max([v for _, v in points if v] + [1.0] + ([target] if target else [])) * 1.1
    x_of = lambda s: left + int((s - min(steps)) / max(1, max(steps) - min(steps)) * (right - left))  # noqa: E731
    y_of = lambda v: bottom - int(v / top_value * (bottom - top))  # noqa: E731
    for whole in range(1, int(top_value) + 1):
        c.line(left, y_of(whole), right, y_of(whole), _GRID)
    c.line(left, top, left, bottom, _AXIS)
    c.line(left, bottom, right, bottom, _AXIS)
    for s in steps:
        c.line(x_of(s), bottom, x_of(s), bottom + 4, _AXIS)
    c.line(left, y_of(1.0), right, y_of(1.0), _ONE)
    if target:
        c.line(left, y_of(target), right, y_of(target), _TARGET, dash=6)
    best, prev = 0.0, None
    for s, v in points:
        if v:
            best = max(best, v)
        if best:
            cur = (x_of(s), y_of(best))
            if prev:
                c.line(prev[0], prev[1], cur[0], prev[1], _BEST)
                c.line(cur[0], prev[1], cur[0], cur[1], _BEST)
            prev = cur
    for s, v in points:
        if v:
            c.dot(x_of(s), y_of(v), _OK)
        else:
            c.cross(x_of(s), bottom - 5, _BAD)
    path.write_bytes(c.png())
    return path


def series_png(series: dict[str, list[float | None]], path: Path, *, log: bool = True, hline: float | None = 1.0,
               width: int = 900, height: int = 380) -> Path:
    """Several series over the same x positions (cases), one colour each from PALETTE in order, dots joined
    by lines; y on a log scale by default, with light lines at each power of ten and a grey line at
    ``hline``. Missing values leave gaps."""
    import math

    c = _Canvas(width, height)
    left, right, top, bottom = 40, width - 15, 15, height - 30
    n = max((len(v) for v in series.values()), default=1)
    values = [v for vs in series.values() for v in vs if v] + ([hline] if hline else [])
    lo, hi = (min(values), max(values)) if values else (0.1, 10.0)
    f = (lambda v: math.log10(v)) if log else (lambda v: v)  # noqa: E731
    lo_t, hi_t = f(lo) - 0.1 * abs(f(hi) - f(lo) or 1), f(hi) + 0.1 * abs(f(hi) - f(lo) or 1)
    x_of = lambda i: left + int(i / max(1, n - 1) * (right - left))  # noqa: E731
    y_of = lambda v: bottom - int((f(v) - lo_t) / (hi_t - lo_t) * (bottom - top))  # noqa: E731
    if log:
        for e in range(math.floor(lo_t), math.ceil(hi_t) + 1):
            if lo_t <= e <= hi_t:
                y = bottom - int((e - lo_t) / (hi_t - lo_t) * (bottom - top))
                c.line(left, y, right, y, _GRID)
    c.line(left, top, left, bottom, _AXIS)
    c.line(left, bottom, right, bottom, _AXIS)
    for i in range(n):
        c.line(x_of(i), bottom, x_of(i), bottom + 4, _AXIS)
    if hline:
        c.line(left, y_of(hline), right, y_of(hline), _ONE)
    for k, (_, vs) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        prev = None
        for i, v in enumerate(vs):
            if not v:
                prev = None
                continue
            pt = (x_of(i), y_of(v))
            if prev:
                c.line(prev[0], prev[1], pt[0], pt[1], colour)
            c.dot(pt[0], pt[1], colour)
            prev = pt
    path.write_bytes(c.png())
    return path
