"""What a register holds, lane by lane, for the lane dataflow check (``kpilot isa lanes``).

``Data``: a value made from the wave's loaded values: for each lane, how many times each source lane's loaded value
reached it (a count per source lane), with the opcodes that combined them, the cross-lane exchanges on the way,
the conversions on the way, and the lanes that took an undefined old value. ``Index``: a lane-dependent integer
the code computes from the lane id and constants (so that an exchange's source lane can be read from it), one
known value per lane or None. Anything else (addresses, unknown registers) is ``None``.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field, replace
from typing import Union

__all__ = ["Data", "Index", "Value", "seed", "combine", "broadcast", "const", "exchange", "choose", "new_origin",
           "idempotent", "zero_neutral", "convert", "index_op"]

Counts = tuple[int, ...]


@dataclass(frozen=True)
class Data:
    lanes: tuple[Counts, ...]                        # per lane: count per source lane
    ops: frozenset[str] = frozenset()                # operations that combined two values on the way (opcodes)
    exchanges: tuple[str, ...] = ()                  # cross-lane steps on the way, in order ("row_shr:1", "SHFL.BFLY 16")
    converted: tuple[str, ...] = ()                  # conversions on the way (opcodes)
    undefined: frozenset[int] = frozenset()          # lanes holding an old value never written
    # How many times a lane's own values reached it before its first exchange (a lane may first combine several
    # of its own: elements packed in a register, a row's share of a tile): once each is that many.
    per_lane: int = 1
    # Where the value was last made by a load, an exchange or a combination: a lane's own transforms keep it, so
    # that x combined with a function of x (a key and its sign) is one value, while x combined with its copy
    # from another lane holding the same sources is two.
    origin: int = field(default_factory=lambda: next(_ORIGINS))
    moved_from: int | None = None                    # the origin of the value an exchange moved to make this one
    # Steps whose result was combined with the value they moved while every lane already held the same sources:
    # each lane counted twice from there on (a step applied once too often).
    repeated: tuple[str, ...] = ()
    # Passed through a select between it and a constant on a condition the check cannot follow (where(hit, x, 0)):
    # some lanes may hold the constant, so its counts are an upper bound.
    masked: bool = False
    zeroed: frozenset[int] = frozenset()            # lanes where this exchange read 0 for want of a source lane
    # lanes whose value took such a 0 through an operation for which 0 is not neutral (max, min, mul, and):
    # a max over negative values, say, comes out 0 there
    zero_mixed: frozenset[int] = frozenset()


_ORIGINS = itertools.count()


def new_origin() -> int:
    return next(_ORIGINS)


@dataclass(frozen=True)
class Index:
    values: tuple[int | None, ...]                   # per lane


Value = Union[Data, Index, None]


def seed(width: int) -> Data:
    """A loaded value: lane l holds its own, once."""
    return Data(tuple(tuple(1 if s == l else 0 for s in range(width)) for l in range(width)))


def const(width: int, value: int | None) -> Index:
    return Index((value,) * width)


def _merge_steps(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """The steps of two paths that meet: the longer where one continues the other (so a step taken twice stays
    twice), else the first's and then the second's others."""
    if b[:len(a)] == a:
        return b
    if a[:len(b)] == b:
        return a
    return a + tuple(s for s in b if s not in a)


def combine(values: list[Value], op: str, width: int, *, select: bool = False) -> Value:
    """The value an operation makes from its sources: the Data sources' counts added lane by lane (for a select,
    the larger count of each, since one of the two is taken), the rest kept as they came; with no Data source,
    None (the caller computes an Index itself where it can)."""
    data: list[Data] = []
    for v in values:                   # the same lanes twice (x and a function of x): one value, not two
        if isinstance(v, Data) and not any(v.origin == d.origin for d in data):
            data.append(v)
    if not data:
        return None
    if len(data) == 1:                 # a lane's own transform (a constant added, a key made): nothing combined
        if select and len(values) > 1 and not data[0].masked:
            return replace(data[0], masked=True)
        return data[0]
    # A reduction's result (every lane that contributed to a lane holds the same result: an all-reduce over a row,
    # a half or the wave, or a value read back for every lane) applied to values already inside it (x / sum,
    # x - max) is a use of the reduction, not a step of one: the other values keep their counts.
    results = [d for d in data if _all_reduced(d, width)]
    others = [d for d in data if not any(d is r for r in results)]
    inside = others and results and all(_within(o, r, width) for o in others for r in results)
    counted = others if inside and not select else data
    twice = tuple(b.exchanges[-1] for a in data for b in data
                  if a is not b and a.lanes == b.lanes and b.moved_from == a.origin and b.exchanges
                  and not idempotent(op))
    if not others and not twice:
        union = True      # results of reductions combined (a sum over a maximum): each reached once, not twice
    else:
        union = select
    lanes = []
    for lane in range(width):
        rows = [d.lanes[lane] for d in counted]
        if union:
            lanes.append(tuple(map(max, *rows)))
        else:
            total = rows[0]
            for r in rows[1:]:
                total = tuple(map(operator.add, total, r))
            lanes.append(total)
    exchanges: tuple[str, ...] = ()
    converted: tuple[str, ...] = ()
    for d in counted:                  # a reduction only used here keeps its path to itself (checked where it is read)
        exchanges = _merge_steps(exchanges, d.exchanges)
        converted = _merge_steps(converted, d.converted)
    combined = frozenset({op}) if len(counted) > 1 else frozenset()
    crossed = [d for d in counted if d.exchanges]
    per_lane = (max(d.per_lane for d in crossed) if crossed
                else max(max(lanes[l][l], 1) for l in range(width)))
    repeated = tuple(dict.fromkeys(r for d in data for r in d.repeated)) + tuple(
        t for t in twice if not any(t in d.repeated for d in data))
    masked = any(d.masked for d in data) or (select and any(not isinstance(v, Data) for v in values))
    zero_mixed = frozenset().union(*(d.zero_mixed for d in data))
    if not zero_neutral(op):
        zero_mixed |= frozenset().union(*(d.zeroed for d in data))
    return Data(tuple(lanes), frozenset().union(*(d.ops for d in data)) | combined, exchanges, converted,
                frozenset().union(*(d.undefined for d in data)), per_lane=per_lane, repeated=repeated, masked=masked,
                zero_mixed=zero_mixed)


# Combining operations for which a lane counted twice changes nothing (max, min, bitwise and/or, selects, moves).
IDEMPOTENT = ("max", "min", "mnmx", "and", "or_b", "lop3", "cndmask", "cselect", "sel", "mov")


# Operations for which a 0 operand changes nothing (so bound_ctrl's 0 stands in for a missing lane).
ZERO_NEUTRAL = ("add", "sub", "or_b", "xor", "mov", "cndmask", "sad", "lop3", "iadd", "fadd", "sel")


def zero_neutral(op: str) -> bool:
    low = op.lower()
    return any(k in low for k in ZERO_NEUTRAL) and not any(k in low for k in ("fma", "mad", "mul"))


def idempotent(op: str) -> bool:
    low = op.lower()
    return any(k in low for k in IDEMPOTENT) and "xor" not in low


def _all_reduced(d: Data, width: int) -> bool:
    """Whether every lane that reaches a lane holds that lane's very counts, more than one lane reaching each (the
    result of an all-reduce, not a lane's own value)."""
    return all(sum(1 for c in d.lanes[l] if c) > 1 and all(d.lanes[s] == d.lanes[l] for s in range(width) if d.lanes[l][s])
               for l in range(width) if any(d.lanes[l]))


def _within(inner: Data, outer: Data, width: int) -> bool:
    """Whether, lane by lane, every source of ``inner`` is a source of ``outer``."""
    return all(not inner.lanes[l][s] or outer.lanes[l][s] for l in range(width) for s in range(width))


def broadcast(d: Data, lane: int, width: int, step: str) -> Data:
    """Every lane given lane ``lane``'s value (a readlane, or a scalar that every lane then reads)."""
    return replace(d, lanes=(d.lanes[lane],) * width, exchanges=d.exchanges + (step,), origin=new_origin(),
                   moved_from=d.origin, zeroed=frozenset(),
                   zero_mixed=frozenset(range(width)) if lane in d.zero_mixed else frozenset(),
                   undefined=frozenset(range(width)) if lane in d.undefined else frozenset())


def exchange(src: Value, sources: list[int | None], width: int, step: str) -> Value:
    """A cross-lane read: lane l gets ``src`` from lane ``sources[l]``, or 0 where that is None (no source lane).
    Lanes an instruction does not write (a DPP control's masks, no bound_ctrl) keep their old value through
    ``choose``."""
    if isinstance(src, Index):
        return Index(tuple(src.values[f] if f is not None else 0 for f in sources))
    if not isinstance(src, Data):
        return None
    zero = (0,) * width
    lanes = [src.lanes[f] if f is not None else zero for f in sources]
    per_lane = src.per_lane if src.exchanges else max(max(src.lanes[l][l], 1) for l in range(width))
    return Data(tuple(lanes), src.ops, src.exchanges + (step,), src.converted,
                frozenset(l for l, f in enumerate(sources) if f is not None and f in src.undefined),
                per_lane=per_lane, moved_from=src.origin, repeated=src.repeated, masked=src.masked,
                zeroed=frozenset(l for l, f in enumerate(sources) if f is None),
                zero_mixed=frozenset(l for l, f in enumerate(sources) if f is not None and f in src.zero_mixed))


def convert(value: Value, op: str) -> Value:
    """A value through a conversion: Data records it on its path, a lane-dependent integer passes as it is."""
    if isinstance(value, Data):
        return replace(value, converted=value.converted + (op,))
    return value if isinstance(value, Index) else None


def index_op(fn, values: list[Value], width: int) -> Value:
    """``fn`` applied lane by lane to lane-dependent integers (32-bit results); None where any source is not one or
    ``fn`` does not apply."""
    if fn is None or not values or not all(isinstance(v, Index) for v in values):
        return None
    try:
        return Index(tuple(None if None in args else fn(*args) & 0xFFFFFFFF
                           for args in zip(*(v.values for v in values))))     # type: ignore[union-attr]
    except TypeError:
        return None


def choose(mask: list[bool], a: Value, b: Value, width: int) -> Value:
    """Lane by lane, ``a`` where ``mask`` holds and ``b`` elsewhere (lanes an instruction did not write keep the
    register's old value)."""
    if all(mask):
        return a
    if not any(mask):
        return b
    if isinstance(a, Index) or isinstance(b, Index) or a is None or b is None:
        if isinstance(a, Data) or isinstance(b, Data):
            d = a if isinstance(a, Data) else b
            other = b if d is a else a
            zero = (0,) * width
            take = mask if d is a else [not m for m in mask]
            return replace(d, lanes=tuple(d.lanes[l] if take[l] else zero for l in range(width)), origin=new_origin(),
                           undefined=frozenset(l for l in range(width) if (not take[l] and other is None)
                                               or (take[l] and l in d.undefined)),
                           zeroed=frozenset(l for l in d.zeroed if take[l]),
                           zero_mixed=frozenset(l for l in d.zero_mixed if take[l]))
        va = a.values if isinstance(a, Index) else (None,) * width
        vb = b.values if isinstance(b, Index) else (None,) * width
        return Index(tuple(va[l] if mask[l] else vb[l] for l in range(width)))
    return Data(tuple(a.lanes[l] if mask[l] else b.lanes[l] for l in range(width)), a.ops | b.ops,
                _merge_steps(b.exchanges, a.exchanges), _merge_steps(b.converted, a.converted),
                frozenset(l for l in range(width) if (l in a.undefined if mask[l] else l in b.undefined)),
                per_lane=max(a.per_lane, b.per_lane), repeated=tuple(dict.fromkeys(a.repeated + b.repeated)),
                masked=a.masked or b.masked,
                zeroed=frozenset(l for l in range(width) if l in (a.zeroed if mask[l] else b.zeroed)),
                zero_mixed=frozenset(l for l in range(width) if l in (a.zero_mixed if mask[l] else b.zero_mixed)))
