"""What a job needs on the machine that runs it: the problem's files, the candidate and any baseline files, as a
content-addressed bundle (bundle path -> sha256), so that a file the target already holds is not sent again.

Bundle paths: ``problem/...`` (the problem's files, relative to the folder that holds them all: GPU MODE's
``task.yml`` may take a file from the folder above), ``candidate/NAME``, ``baselines/N/NAME``. ``BlobStore`` is
the target's side: blobs by hash, checked as they arrive; ``materialize`` lays a bundle out in a folder.

Plain stdlib (no torch): the client side runs where kernelpilot is only a front end.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from kernelpilot.errors import KernelpilotError, UsageError

__all__ = ["Bundle", "BlobStore", "make_bundle", "materialize", "sha256"]

_MAX_BYTES = 1 << 30          # a bundle larger than this is refused (problems are code, not data)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Bundle:
    """The files of one job, and where its problem, candidate and baseline files are in it."""

    files: dict[str, str]                       # bundle path -> sha256
    problem: str                                # bundle path of the problem (its folder or its file)
    candidate: str | None
    baselines: dict[str, str] = field(default_factory=dict)   # a baseline as the user named it -> bundle path
    blobs: dict[str, bytes] = field(default_factory=dict, repr=False)   # sha256 -> content (the client's side)

    def manifest(self) -> dict[str, object]:
        return {"files": dict(self.files), "problem": self.problem, "candidate": self.candidate,
                "baselines": dict(self.baselines)}


def _problem_files(problem: Path) -> tuple[Path, list[Path]]:
    """The folder all of a problem's files lie under, and the files (those its seal covers)."""
    from kernelpilot.evaluate.problem import load_problem
    from kernelpilot.evaluate.problem_files import problem_files

    files = problem_files(load_problem(problem))
    if not files:
        raise KernelpilotError(f"{problem}: no files to send for this problem.")
    anchor = problem.resolve() if problem.is_dir() else problem.resolve().parent
    root = Path(os.path.commonpath([anchor, *(f.parent for f in files)]))
    return root, files


def make_bundle(problem: str | Path, candidate: str | Path | None = None, baselines: tuple[str, ...] = ()) -> Bundle:
    """The bundle of a job on ``problem`` with ``candidate`` and ``baselines`` (eager and compile are names, not
    files)."""
    problem = Path(problem)
    root, files = _problem_files(problem)
    rel = problem.resolve().relative_to(root)
    out = Bundle(files={}, problem="problem" if rel == Path(".") else f"problem/{rel.as_posix()}", candidate=None)
    total = 0

    def add(path: Path, name: str) -> None:
        nonlocal total
        try:
            data = path.read_bytes()
        except OSError as e:
            raise KernelpilotError(f"{path}: cannot be read ({e.strerror or e}).") from None
        total += len(data)
        if total > _MAX_BYTES:
            raise UsageError(f"the job's files pass {_MAX_BYTES >> 20} MiB: too much to send to a target.")
        digest = sha256(data)
        out.files[name] = digest
        out.blobs[digest] = data

    for f in files:
        add(f, f"problem/{f.relative_to(root).as_posix()}")
    if candidate is not None:
        cand = Path(candidate)
        if not cand.is_file():
            raise UsageError(f"{cand}: no such candidate file.")
        out.candidate = f"candidate/{cand.name}"
        add(cand, out.candidate)
    for i, base in enumerate(baselines):
        if base in ("eager", "compile"):
            continue
        path = Path(base)
        if not path.is_file():
            raise UsageError(f"baseline {base}: no such file (eager, compile, or a candidate file).")
        out.baselines[base] = f"baselines/{i}/{path.name}"
        add(path, out.baselines[base])
    return out


class BlobStore:
    """A target's blobs, by sha256, in a folder: each checked against its hash when it arrives."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, digest: str) -> Path:
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise KernelpilotError(f"not a sha256: {digest[:80]!r}")
        return self.root / digest[:2] / digest

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def missing(self, digests: list[str]) -> list[str]:
        return sorted({d for d in digests if not self.has(d)})

    def put(self, digest: str, data: bytes) -> None:
        if sha256(data) != digest:
            raise KernelpilotError(f"blob {digest[:12]}: its content does not match its hash.")
        p = self.path(digest)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, p)


def materialize(files: dict[str, str], store: BlobStore, into: Path) -> None:
    """Lay the bundle ``files`` out under ``into`` from ``store``; a path that would leave ``into`` is refused."""
    into = Path(into).resolve()
    for name, digest in files.items():
        target = (into / name).resolve()
        if into not in target.parents:
            raise KernelpilotError(f"bundle path {name!r} leaves the job's folder.")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.path(digest).read_bytes())
