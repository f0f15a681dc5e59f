"""``python -m kernelpilot.targets.serve [--root DIR]``: a target's end of a connection. It reads requests, one JSON
object per line, on its standard input and answers on its standard output, one job at a time:

    {"op": "hello"}                                  -> {"hello": {"protocol", "version", "build", "host", "device", "gpus"}}
    {"op": "missing", "blobs": [sha256, ...]}        -> {"missing": [the ones it lacks]}
    {"op": "blob", "sha": ..., "data": base64}       -> {"stored": sha}
    {"op": "run", "id": N, "operation": "check", "options": {...}, "bundle": {...}}
                                                     -> {"event": {...}, "id": N} ... then {"result": {...}, "id": N}
                                                        or {"error": {"type", "message", ...}, "id": N}

A job's files (the bundle) are laid out under ``--root`` (default ``~/.kpilot/target``): the problem's once per
content (``problems/``, kept: later jobs on it find the same paths, and the process's worker pool keeps its
reference worker, the reference's outputs for the secret seeds and the baselines' timings), the candidate's in a
folder of the job's own, removed afterwards. Its options' paths resolve there only (the tool registry's
confinement). The
process's own standard output is kept for the protocol: anything else printing to it goes to standard error.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import socket
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError, error_json
from kernelpilot.targets.bundle import BlobStore, materialize

__all__ = ["main", "PROTOCOL", "OPERATIONS", "build_id"]

PROTOCOL = "kernelpilot.target/1"
# What a target runs: the operations that run a candidate on a problem.
OPERATIONS = ("check", "bench", "eval", "profile")
_MAX_LINE = 1 << 31


@functools.cache
def build_id() -> str:
    """This kernelpilot's version and a hash of its code: two ends agree only when both are equal."""
    import hashlib

    from kernelpilot import __version__

    h = hashlib.sha256()
    pkg = Path(__file__).resolve().parents[1]
    for p in sorted(pkg.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".toml", ".md", ".h", ".json"):
            h.update(str(p.relative_to(pkg)).encode())
            h.update(p.read_bytes())
    return f"{__version__}+{h.hexdigest()[:12]}"


def _hello() -> dict[str, Any]:
    """Who answers. The device comes from the NVIDIA driver alone (milliseconds; asking torch would cost a second
    of import on every connection): "cuda" with a GPU, "cpu" with a driver and none, null without a driver (a
    job's own default then decides)."""
    from kernelpilot import __version__
    from kernelpilot.evaluate.runner import _nvidia_device_count

    gpus = _nvidia_device_count()
    return {"protocol": PROTOCOL, "version": __version__, "build": build_id(), "host": socket.gethostname(),
            "python": sys.version.split()[0], "device": None if gpus is None else ("cuda" if gpus else "cpu"),
            "gpus": gpus or 0}


def _problem_dir(files: dict[str, str], root: Path, store: BlobStore) -> Path:
    """The job's problem files, laid out once per content under ``root/problems`` and kept: a later job on the
    same problem finds the same paths, so the worker pool's reference worker (which imported the problem from
    there) and its kept outputs serve it."""
    import hashlib

    mine = {k: v for k, v in sorted(files.items()) if k == "problem" or k.startswith("problem/")}
    key = hashlib.sha256(json.dumps(mine).encode()).hexdigest()[:24]
    home = root / "problems" / key
    if not (home / ".complete").exists():
        tmp = root / "problems" / f"{key}.{uuid.uuid4().hex[:8]}"
        materialize(mine, store, tmp)
        (tmp / ".complete").touch()
        try:
            os.rename(tmp, home)
        except OSError:                       # another job laid it out first
            shutil.rmtree(tmp, ignore_errors=True)
    return home


def _run(request: dict[str, Any], root: Path, store: BlobStore, say, pool: Any) -> dict[str, Any]:
    from kernelpilot.tools import ToolContext, call

    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise KernelpilotError(f"a target runs {', '.join(OPERATIONS)}, not {operation!r}.")
    bundle = request.get("bundle") or {}
    files = bundle.get("files") or {}
    missing = store.missing(list(files.values()))
    if missing:
        raise KernelpilotError(f"{len(missing)} of the job's files were not sent.")
    problem_home = _problem_dir(files, root, store)
    args = dict(request.get("options") or {})
    named = str(bundle.get("problem") or "problem")
    if named != "problem" and not named.startswith("problem/"):
        raise KernelpilotError(f"the job's problem {named!r} is not among its problem files.")
    args["problem"] = str(problem_home / named)
    job = root / "jobs" / uuid.uuid4().hex
    try:
        materialize({k: v for k, v in files.items() if not (k == "problem" or k.startswith("problem/"))}, store, job)
        ctx = ToolContext(workspace=job, confined=True, also=(problem_home,), pool=pool,
                          on_event=lambda e: say({"event": e, "id": request.get("id")}))
        return call(operation, args, ctx)
    finally:
        shutil.rmtree(job, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    root = Path(args[args.index("--root") + 1]) if "--root" in args else Path.home() / ".kpilot" / "target"
    root.mkdir(parents=True, exist_ok=True)
    store = BlobStore(root / "blobs")
    # The protocol's own channel: fd 1 as it was; whatever else writes to fd 1 from now on lands on stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    lock = threading.Lock()
    pool = None

    def say(message: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps(message, default=str) + "\n")
            out.flush()

    # The connection read in a thread of its own: when it ends (the client's Ctrl-C, a dropped host) while a job
    # runs, the process ends at once, and its workers' supervisors, seeing their parent gone, end the workers.
    import queue

    lines: queue.Queue = queue.Queue()
    busy = threading.Event()

    def read() -> None:
        for received in sys.stdin:
            lines.put(received)
        if busy.is_set():
            os._exit(1)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    while (line := lines.get()) is not None:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
        except json.JSONDecodeError as e:
            say({"error": {"type": "ProtocolError", "message": f"not JSON: {e.msg}", "hint": None, "details": None,
                           "exit_code": 2}})
            continue
        op, ident = (msg.get("op"), msg.get("id")) if isinstance(msg, dict) else (None, None)
        try:
            if op == "hello":
                say({"hello": _hello()})
            elif op == "missing":
                say({"missing": store.missing([str(b) for b in msg.get("blobs") or []])})
            elif op == "blob":
                store.put(str(msg.get("sha")), base64.b64decode(msg.get("data") or ""))
                say({"stored": msg.get("sha")})
            elif op == "run":
                if pool is None:
                    from kernelpilot.evaluate.isolation import WorkerPool

                    pool = WorkerPool(spares=1, problems=2)    # workers start ahead of this target's next job
                busy.set()
                try:
                    say({"result": _run(msg, root, store, say, pool), "id": ident})
                finally:
                    busy.clear()
            elif op == "bye":
                break
            else:
                say({"error": {"type": "ProtocolError", "message": f"unknown op {op!r}", "hint": None,
                               "details": None, "exit_code": 2}, "id": ident})
        except KernelpilotError as e:
            say({"error": error_json(e), "id": ident})
        except Exception as e:  # noqa: BLE001 - a job's failure is its answer; the target goes on serving
            say({"error": {"type": "InternalError", "message": f"internal error: {type(e).__name__}: {e}",
                           "hint": None, "details": None, "exit_code": 1}, "id": ident})
    if pool is not None:
        pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
