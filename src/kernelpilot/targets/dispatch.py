"""Running an operation on a target: open its channels (``local``: one ``serve`` process per visible GPU, or one
on the CPU; ``ssh``: one per GPU of the host), ship the job's bundle, and read the answer.

``remote_options`` turns an operation's options into the arguments a target runs it with: the problem, the
candidate and baseline files become their places in the bundle, and options that name this machine's folders
(``keep``, ``writable``) are refused, since the target cannot reach them.
"""

from __future__ import annotations

import os
import socket
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

from kernelpilot.errors import KernelpilotError, UsageError
from kernelpilot.options import offered, to_json
from kernelpilot.targets.bundle import Bundle, make_bundle
from kernelpilot.targets.channel import Channel
from kernelpilot.targets.config import TargetSpec, get_target

__all__ = ["open_channels", "remote_options", "run_remote", "local_info", "serve_argv", "spread"]


def local_info(device: str | None) -> dict[str, Any]:
    """The ``target`` a result run here records."""
    return {"name": "local", "host": socket.gethostname(), "device": device}


def serve_argv(root: Path | None = None) -> list[str]:
    return [sys.executable, "-m", "kernelpilot.targets.serve", "--root",
            str(root or Path.home() / ".kpilot" / "target-local")]


def _local_gpus() -> int:
    from kernelpilot.evaluate.runner import _nvidia_device_count

    return _nvidia_device_count() or 0


def open_channels(spec: TargetSpec, *, slots: int | None = None, build: str | None = None) -> list[Channel]:
    """Connected channels to ``spec``: ``slots`` of them, or one per GPU there (one where it has none)."""
    from kernelpilot.targets.serve import build_id

    build = build or build_id()
    if spec.kind == "local":
        gpus = _local_gpus()
        n = slots or max(gpus, 1)
        src = str(Path(__file__).resolve().parents[2])
        channels = []
        for i in range(n):
            env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
            if n > 1 and "OMP_NUM_THREADS" not in os.environ:
                # each worker its share of the cores: several CPU evaluations at once, each with a thread per
                # core, would contend for them rather than overlap
                env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // n))
            if gpus:    # one worker per GPU: the i-th of those this process sees
                visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
                env["CUDA_VISIBLE_DEVICES"] = visible[i % gpus] if len(visible) == gpus else str(i % gpus)
            ch = Channel("local", serve_argv(), env=env)
            ch.open().extra["worker"] = i          # this very install: nothing to compare
            if gpus:
                ch.remote.extra["gpu"] = i % gpus
            channels.append(ch)
        return channels
    if spec.kind == "ssh":
        from kernelpilot.targets.ssh import serve_command

        first = Channel(spec.name, serve_command(spec, build))
        remote = first.open(expect_build=build)
        if remote.gpus <= 1 and (slots or 1) == 1:
            remote.extra["worker"] = 0
            return [first]
        first.close()                       # several workers there: one per GPU, each pinned to its own
        channels = []
        for i in range(slots or remote.gpus):
            gpu = i % remote.gpus if remote.gpus else None
            ch = Channel(spec.name, serve_command(spec, build, gpu))
            ch.open(expect_build=build).extra.update({"worker": i, **({"gpu": gpu} if gpu is not None else {})})
            channels.append(ch)
        return channels
    raise UsageError(f"target {spec.name} is a {spec.kind} target: it runs batches (kpilot eval-batch), not one job.")


def remote_options(operation: str, opts: Any, bundle: Bundle) -> dict[str, Any]:
    """``opts`` as a target's arguments: paths into the bundle; nothing that names this machine's folders."""
    offered_names = {p.name for p in offered(type(opts), "tool", operation)}
    args = {k: v for k, v in to_json(opts).items() if k in offered_names and v not in (None, [], {}, ())}
    args.pop("target", None)
    args.pop("out", None)                  # a profile's report stays with the job there
    if getattr(opts, "sandbox", True) is False:     # not a tool's option: a target always boxes its candidates
        raise UsageError("--no-sandbox: a target, and so every eval-batch worker, runs each candidate in its box; "
                         "run without it (check, bench and eval take it without --target).")
    for local_only in ("keep", "writable", "report", "details", "command"):
        if local_only in args:
            raise UsageError(f"{local_only}: names a folder or a program of this machine, which a target cannot "
                             "reach; run without it, or on the local target.")
    args["problem"] = bundle.problem
    if bundle.candidate:
        args["candidate"] = bundle.candidate
    if "baselines" in args:
        args["baselines"] = [bundle.baselines.get(b, b) for b in args["baselines"]]
    return args


def run_remote(target: str, operation: str, opts: Any,
               on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run one job of ``operation`` on the named target; its JSON result with ``"target"`` saying where."""
    spec = get_target(target)
    bundle = make_bundle(opts.problem, opts.candidate, tuple(getattr(opts, "baselines", ()) or ()))
    args = remote_options(operation, opts, bundle)
    (channel,) = open_channels(spec, slots=1)
    try:
        return channel.run(operation, args, bundle, on_event)
    except KeyboardInterrupt:
        channel.kill()             # Ctrl-C stops the work there too
        raise
    finally:
        channel.close()


class _Queue:
    """The items waiting, handed to channels with affinity: a channel takes an item of a group it has served
    before (the same problem: its process keeps the reference worker, the reference's outputs and the
    baselines' timings), else one of a group no channel has started, else one of the group with the most
    items left. So two workers split two problems instead of both setting up each."""

    def __init__(self, n: int, group: Callable[[int], Any]) -> None:
        import threading

        self.pending = list(range(n))
        self.tries = dict.fromkeys(self.pending, 0)
        self.group = group
        self.started: set[Any] = set()
        self.served: dict[int, set[Any]] = {}
        self.lock = threading.Lock()

    def take(self, channel: int) -> int | None:
        with self.lock:
            if not self.pending:
                return None
            mine = self.served.setdefault(channel, set())
            pick = next((i for i in self.pending if self.group(i) in mine), None)
            if pick is None:
                pick = next((i for i in self.pending if self.group(i) not in self.started), None)
            if pick is None:
                ((most, _),) = Counter(map(self.group, self.pending)).most_common(1)
                pick = next(i for i in self.pending if self.group(i) == most)
            self.pending.remove(pick)
            mine.add(self.group(pick))
            self.started.add(self.group(pick))
            return pick

    def give_back(self, i: int) -> None:
        with self.lock:
            self.tries[i] += 1
            self.pending.insert(0, i)

    def drain(self) -> list[int]:
        with self.lock:
            left, self.pending = self.pending, []
            return left


def spread(items: list[Any], channels: list[Any], work: Callable[[Any, Any], Any], *, retries: int = 0,
           group: Callable[[Any], Any] | None = None) -> Iterator[tuple[int, Any, KernelpilotError | None]]:
    """Run ``work(channel, item)`` for every item, one item at a time per channel, the channels at once; yield
    ``(index, value, error)`` here as each item finishes. With ``group`` (an item's problem), a channel keeps to
    the groups it has served while it can (``_Queue``). A channel whose connection is lost (``TargetLost``)
    takes no more items and gives its item back for another (``retries`` times), then the item fails with it;
    once no channel is left, every item still waiting fails. Any other KernelpilotError fails its item only."""
    import queue
    import threading

    from kernelpilot.targets.channel import TargetLost

    todo = _Queue(len(items), (lambda i: group(items[i])) if group is not None else (lambda i: i))
    done: queue.Queue = queue.Queue()
    alive = len(channels)
    lock = threading.Lock()

    def run(k: int, channel: Any) -> None:
        nonlocal alive
        while True:
            i = todo.take(k)
            if i is None:
                return
            try:
                done.put((i, work(channel, items[i]), None))
            except TargetLost as e:
                if todo.tries[i] < retries:
                    todo.give_back(i)
                else:
                    done.put((i, None, e))
                with lock:
                    alive -= 1
                    if alive == 0:          # no channel left: what is still waiting fails, it is not lost
                        for left in todo.drain():
                            done.put((left, None, TargetLost("no worker left to run it")))
                return
            except KernelpilotError as e:
                done.put((i, None, e))

    for k, channel in enumerate(channels):
        threading.Thread(target=run, args=(k, channel), daemon=True).start()
    if not channels:
        for i in range(len(items)):
            done.put((i, None, TargetLost("no worker left to run it")))
    for _ in items:
        yield done.get()
