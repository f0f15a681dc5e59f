"""The run store: every optimization run and each of its steps, in SQLite (``.kpilot/runs.db`` in the
working folder by default).

A step is written whole, in one transaction, once it has finished: a process killed mid-run loses at most
the step in flight, and ``--resume`` carries on from the last one written. The database is in WAL mode, so
``kpilot runs show`` can read while a run writes.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError

__all__ = ["DEFAULT_PATH", "store_option", "RunRecord", "StepRecord", "RunStore"]

DEFAULT_PATH = Path(".kpilot") / "runs.db"


def store_option(help: str = "The run store (SQLite).") -> Any:
    """The ``store`` option of every operation that reads or writes runs, declared once."""
    from kernelpilot.options import param

    return param(help, DEFAULT_PATH, path=True)


SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    finished REAL,
    problem TEXT NOT NULL,
    strategy TEXT NOT NULL,
    start_candidate TEXT,
    status TEXT NOT NULL,          -- running, done, stopped, failed
    stop_reason TEXT,
    target REAL,
    budget INTEGER,
    options TEXT NOT NULL DEFAULT '{}',
    device TEXT,
    gpu TEXT,
    baseline_us REAL,
    best_step INTEGER,
    best_speedup REAL
);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    n INTEGER NOT NULL,             -- 0, 1, 2, ... within the run
    parent INTEGER,                 -- the step it was derived from
    kind TEXT NOT NULL,             -- start, variant, proposal, retry
    hypothesis TEXT,
    params TEXT,                    -- JSON: the configuration tried (search)
    code TEXT,
    diff TEXT,                      -- unified diff to the parent's code
    isa TEXT,                       -- JSON summary
    profile TEXT,                   -- JSON summary
    correct INTEGER,                -- NULL: not checked
    passed INTEGER,
    check_summary TEXT,             -- JSON: failed cases, flags
    median_us REAL,
    timing TEXT,                    -- JSON
    speedup REAL,                   -- over the run's start
    error TEXT,
    tokens_in INTEGER,
    tokens_out INTEGER,
    cost_usd REAL,
    started REAL,
    finished REAL,
    trace TEXT,                     -- JSON: the model's messages, tool calls and results, evaluations' events
    UNIQUE(run_id, n)
);
"""

_JSON_STEP = ("params", "isa", "profile", "check_summary", "timing", "trace")


@dataclass
class RunRecord:
    id: int
    created: float
    problem: str
    strategy: str
    status: str
    start_candidate: str | None = None
    finished: float | None = None
    stop_reason: str | None = None
    target: float | None = None
    budget: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    gpu: str | None = None
    baseline_us: float | None = None
    best_step: int | None = None
    best_speedup: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepRecord:
    kind: str
    n: int | None = None
    parent: int | None = None
    hypothesis: str | None = None
    params: dict[str, Any] | None = None
    code: str | None = None
    diff: str | None = None
    isa: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None
    correct: bool | None = None
    passed: bool | None = None
    check_summary: dict[str, Any] | None = None
    median_us: float | None = None
    timing: dict[str, Any] | None = None
    speedup: float | None = None
    error: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    started: float | None = None
    finished: float | None = None
    trace: list[dict[str, Any]] | None = None   # what led to the step: messages, tool calls, evaluations

    def to_json(self, *, code: bool = True, trace: bool = True) -> dict[str, Any]:
        d = asdict(self)
        if not code:
            d.pop("code")
            d.pop("diff")
        if not trace:
            d.pop("trace")
        return d


def _guarded(method):
    """A store method whose failures from a damaged file (a corrupted page, a JSON column that is not JSON, a
    value of the wrong type or a column renamed where a flipped byte changed the file) are one ``KernelpilotError``
    naming the store, not SQLite's, json's or Python's exception."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.IntegrityError:
            raise                      # a step written twice: not damage
        except sqlite3.OperationalError as e:
            if _is_contention(e):
                raise                  # another process holds the file: not damage
            raise _damaged(self.path, e) from None
        except (sqlite3.DatabaseError, ValueError, TypeError, KeyError) as e:
            raise _damaged(self.path, e) from None

    return wrapper


def _is_contention(e: sqlite3.OperationalError) -> bool:
    """Whether SQLite failed because another connection holds the file (locked, busy), which a retry or the user
    can resolve, rather than because the file's bytes are wrong (text that is not UTF-8, a column or table that a
    flipped byte renamed)."""
    text = str(e).lower()
    return "locked" in text or "busy" in text


def _damaged(path: Path, e: Exception) -> KernelpilotError:
    return KernelpilotError(f"{path}: the run store is damaged ({e}).",
                            hint="Runs recorded in it may be lost; keep a copy, and record new runs with "
                                 "--store NEW.db.")


class RunStore:
    """Open (creating when needed) the run store at ``path``. Use as a context manager, or ``close()``."""

    def __init__(self, path: str | Path = DEFAULT_PATH, *, create: bool = True) -> None:
        self.path = Path(path)
        if not self.path.exists():
            if not create:
                raise KernelpilotError(f"{self.path}: no run store here (runs are recorded by `kpilot optimize` in "
                                       "the folder it runs in; pass --store PATH for another).")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(_SCHEMA)
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise KernelpilotError(f"{self.path}: written by a newer kernelpilot (store version {row[0]}).")
            elif int(row[0]) < SCHEMA_VERSION:
                self._migrate(int(row[0]))
        except (sqlite3.DatabaseError, ValueError) as e:    # ValueError: SQLite's message itself is not UTF-8
            raise KernelpilotError(f"{self.path}: not a kernelpilot run store ({e}).") from None

    def _migrate(self, version: int) -> None:
        """Bring a store written by an older kernelpilot up to this one's version, keeping every record."""
        with self._tx():
            columns = {r[1] for r in self.db.execute("PRAGMA table_info(steps)")}
            if version < 2 and "trace" not in columns:
                self.db.execute("ALTER TABLE steps ADD COLUMN trace TEXT")
            self.db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    # ------------------------------------------------------------------ runs

    @_guarded
    def create_run(self, *, problem: str, strategy: str, start_candidate: str | None, target: float | None,
                   budget: int | None, options: dict[str, Any], device: str | None = None) -> int:
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO runs (created, problem, strategy, start_candidate, status, target, budget, options, "
                "device) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                (time.time(), problem, strategy, start_candidate, target, budget, json.dumps(options), device))
            return int(cur.lastrowid)

    @_guarded
    def update_run(self, run_id: int, **values: Any) -> None:
        allowed = {f.name for f in fields(RunRecord)} - {"id", "created"}
        bad = set(values) - allowed
        if bad:
            raise ValueError(f"unknown run fields: {sorted(bad)}")
        if "options" in values:
            values["options"] = json.dumps(values["options"])
        cols = ", ".join(f"{k} = ?" for k in values)
        with self._tx():
            self.db.execute(f"UPDATE runs SET {cols} WHERE id = ?", (*values.values(), run_id))

    @_guarded
    def run(self, run_id: int) -> RunRecord:
        row = self.db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            known = [str(r[0]) for r in self.db.execute("SELECT id FROM runs ORDER BY id DESC LIMIT 10")]
            raise KernelpilotError(f"no run {run_id} in {self.path}" + (f"; latest: {', '.join(known)}." if known else
                                                                         " (it holds no runs)."))
        d = dict(row)
        d["options"] = json.loads(d["options"] or "{}")
        return RunRecord(**d)

    @_guarded
    def runs(self) -> list[RunRecord]:
        return [self.run(r[0]) for r in self.db.execute("SELECT id FROM runs ORDER BY id")]

    # ------------------------------------------------------------------ steps

    @_guarded
    def add_step(self, run_id: int, step: StepRecord) -> int:
        """Write a finished step (numbered next in its run when ``step.n`` is None); returns its number."""
        d = asdict(step)
        for k in _JSON_STEP:
            if d[k] is not None:
                d[k] = json.dumps(d[k], default=str)
        for k in ("correct", "passed"):
            if d[k] is not None:
                d[k] = int(bool(d[k]))
        d["finished"] = d["finished"] or time.time()
        with self._tx():
            if d["n"] is None:
                d["n"] = int(self.db.execute("SELECT COALESCE(MAX(n) + 1, 0) FROM steps WHERE run_id = ?",
                                             (run_id,)).fetchone()[0])
            cols = ", ".join(d)
            self.db.execute(f"INSERT INTO steps (run_id, {cols}) VALUES (?, {', '.join('?' for _ in d)})",
                            (run_id, *d.values()))
        return d["n"]

    @_guarded
    def step_count(self, run_id: int) -> int:
        """How many steps run ``run_id`` has recorded (without reading them)."""
        return int(self.db.execute("SELECT COUNT(*) FROM steps WHERE run_id = ?", (run_id,)).fetchone()[0])

    @_guarded
    def steps(self, run_id: int) -> list[StepRecord]:
        out = []
        for row in self.db.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY n", (run_id,)):
            d = dict(row)
            d.pop("id")
            d.pop("run_id")
            for k in _JSON_STEP:
                if d[k] is not None:
                    d[k] = json.loads(d[k])
            for k in ("correct", "passed"):
                if d[k] is not None:
                    d[k] = bool(d[k])
            out.append(StepRecord(**d))
        return out

    @_guarded
    def step(self, run_id: int, n: int) -> StepRecord:
        for s in self.steps(run_id):
            if s.n == n:
                return s
        raise KernelpilotError(f"run {run_id} has no step {n}.")

    # ------------------------------------------------------------------ plumbing

    def _tx(self) -> _Transaction:
        return _Transaction(self.db)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on an exception): each write is all or nothing."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, *rest) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")

