"""The client's end of a connection to a target: a ``targets/serve.py`` process reached through pipes (started
here for the local GPUs, through the OpenSSH client for a host). One job at a time per channel; a target with
several GPUs is several channels.

A job ships its bundle first (only the blobs the target lacks), then its request; the target's events come back
as they happen and its result last. A connection that drops mid-job is a ``TargetLost`` (the caller retries the
job elsewhere or reports it failed); a version that differs from this one is refused at ``open``.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from kernelpilot.errors import KernelpilotError
from kernelpilot.targets.bundle import Bundle

__all__ = ["Channel", "TargetLost", "TargetError", "Remote"]

_BLOB_CHUNK = 8 << 20


class TargetLost(KernelpilotError):
    """The connection to a target ended (its host dropped, its process died) before the job's answer came."""


class TargetError(KernelpilotError):
    """The target answered with an error: the job's own (a bad problem, a missing file), said as it said it."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(str(error.get("message") or "the target failed"), hint=error.get("hint"))
        self.error = error
        self.exit_code = int(error.get("exit_code") or 1)

    def details(self) -> str | None:
        return self.error.get("details")


@dataclass
class Remote:
    """Where a channel's jobs ran, as every result records it."""

    target: str
    host: str
    device: str | None             # from the NVIDIA driver: cuda, cpu, or None without one
    build: str
    gpus: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.target, "host": self.host, "device": self.device, "build": self.build, **self.extra}


class Channel:
    """A running ``serve`` process behind ``command`` (its argv), for the target ``name``."""

    def __init__(self, name: str, command: list[str], *, env: dict[str, str] | None = None,
                 stderr_limit: int = 20000) -> None:
        self.name, self.command = name, list(command)
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True)
        self._err: list[bytes] = []
        self._limit = stderr_limit
        threading.Thread(target=self._drain, daemon=True).start()
        self.remote: Remote | None = None
        self.lock = threading.Lock()
        self._n = 0

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        total = 0
        for chunk in iter(lambda: self.proc.stderr.read(4096), b""):
            if total < self._limit:
                self._err.append(chunk)
                total += len(chunk)

    def stderr_tail(self) -> str:
        return b"".join(self._err).decode(errors="replace")[-2000:]

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._lost() from None

    def _receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise self._lost()
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            raise TargetLost(f"target {self.name}: an answer that is not JSON: {line[:200]!r}") from None
        if not isinstance(msg, dict):
            raise TargetLost(f"target {self.name}: an answer that is not an object: {line[:200]!r}")
        return msg

    def _lost(self) -> TargetLost:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        tail = self.stderr_tail().strip().splitlines()
        why = tail[-1] if tail else f"exit status {self.proc.returncode}"
        return TargetLost(f"target {self.name}: the connection ended ({why}).")

    def open(self, *, expect_build: str | None = None) -> Remote:
        """Say hello; the target's host, device and build. A build other than ``expect_build`` is refused."""
        self._send({"op": "hello"})
        msg = self._receive()
        hello = msg.get("hello")
        if not isinstance(hello, dict):
            raise TargetLost(f"target {self.name}: no hello ({msg.get('error') or msg}).")
        self.remote = Remote(self.name, str(hello.get("host")), hello.get("device"), str(hello.get("build")),
                             int(hello.get("gpus") or 0))
        if expect_build and self.remote.build != expect_build:
            self.close()
            raise KernelpilotError(f"target {self.name} runs kernelpilot {self.remote.build}, this is {expect_build}.",
                                   hint=f"Run `kpilot target setup {self.name}` to install this version there.")
        return self.remote

    def ship(self, bundle: Bundle) -> int:
        """Send the blobs of ``bundle`` the target lacks; how many bytes went."""
        self._send({"op": "missing", "blobs": sorted(set(bundle.files.values()))})
        missing = self._receive().get("missing")
        if not isinstance(missing, list):
            raise TargetLost(f"target {self.name}: no list of missing files.")
        sent = 0
        for digest in missing:
            data = bundle.blobs.get(digest)
            if data is None:
                raise TargetLost(f"target {self.name}: asked for a file that is not in the job.")
            self._send({"op": "blob", "sha": digest, "data": base64.b64encode(data).decode()})
            answer = self._receive()
            if "error" in answer:
                raise TargetError(answer["error"])
            sent += len(data)
        return sent

    def run(self, operation: str, options: dict[str, Any], bundle: Bundle,
            on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Run one job there; its result (JSON), with ``"target"`` saying where it ran."""
        with self.lock:
            self.ship(bundle)
            self._n += 1
            ident = self._n
            self._send({"op": "run", "id": ident, "operation": operation, "options": options,
                        "bundle": bundle.manifest()})
            while True:
                msg = self._receive()
                if "event" in msg:
                    if on_event is not None:
                        on_event(msg["event"])
                    continue
                if "error" in msg:
                    raise TargetError(msg["error"])
                if "result" in msg and isinstance(msg["result"], dict):
                    return {**msg["result"], "target": self.remote.to_json() if self.remote else {"name": self.name}}
                raise TargetLost(f"target {self.name}: an answer that is neither an event nor a result.")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._send({"op": "bye"})
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=10)
            except (KernelpilotError, OSError, subprocess.TimeoutExpired):
                self.kill()

    def kill(self) -> None:
        """End the connection and, with it, the work there (the ssh client's end closes the remote command)."""
        import os
        import signal

        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
