"""Successive halving over configurations: every survivor of round r is timed with ``budget * eta**r``
seconds; the fastest ``1/eta`` of them (correct ones only) go on, until one is left.

The plan is a pure function of what has been measured, so a run that was stopped picks up exactly where it
was: ``next_trials(keys, results)`` says which configurations still need timing in the current round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Trial", "Result", "next_trials", "rounds_needed", "ranking"]


@dataclass(frozen=True)
class Trial:
    key: str          # configuration key (loop/space.py config_key)
    round: int


@dataclass(frozen=True)
class Result:
    key: str
    round: int
    median_us: float | None      # None: failed (wrong, rejected, crashed)


def rounds_needed(n: int, eta: int = 2) -> int:
    """Rounds until one of ``n`` configurations is left."""
    return 1 if n <= 1 else 1 + math.ceil(math.log(n, eta) - 1e-9)


def _survivors(keys: list[str], results: list[Result], rnd: int, eta: int) -> list[str]:
    """Who takes part in round ``rnd``: everyone in round 0, then the fastest 1/eta of the previous round."""
    if rnd == 0:
        return list(keys)
    prev = _survivors(keys, results, rnd - 1, eta)
    timed = {r.key: r.median_us for r in results if r.round == rnd - 1 and r.key in prev}
    ok = sorted((k for k in prev if timed.get(k) is not None), key=lambda k: (timed[k], prev.index(k)))
    return ok[: max(1, math.ceil(len(ok) / eta))] if len(ok) > 1 else []


def next_trials(keys: list[str], results: list[Result], eta: int = 2) -> list[Trial]:
    """The trials still to run in the earliest unfinished round; [] when the search is over."""
    rnd = 0
    while True:
        who = _survivors(keys, results, rnd, eta)
        if not who:
            return []
        done = {r.key for r in results if r.round == rnd}
        todo = [Trial(k, rnd) for k in who if k not in done]
        if todo:
            return todo
        if len(who) == 1:
            return []           # the last one has been timed: done
        rnd += 1


def ranking(results: list[Result]) -> list[Result]:
    """Correct results, best first: a later round (longer timing) outranks an earlier one for the same key."""
    latest: dict[str, Result] = {}
    for r in results:
        if r.median_us is not None and (r.key not in latest or r.round >= latest[r.key].round):
            latest[r.key] = r
    return sorted(latest.values(), key=lambda r: (-r.round, r.median_us))
