"""Ray targets: an existing Ray cluster (``ray://host:port``, or ``auto`` for the one this machine is part of). Each
job is a Ray task holding one GPU (one CPU on a cluster without GPUs); Ray schedules them. The job's files travel
with the task (its bundle's blobs), are laid out in a folder of the worker's own, and the task answers with the
same JSON as any target, saying on which node it ran. A task whose worker dies is retried by Ray
(``max_retries``), then reported failed; nothing is lost.

Ray is an optional dependency (``pip install 'kernelpilot[ray]'``); its workers need kernelpilot importable, as
any package a cluster's tasks use.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from kernelpilot.errors import KernelpilotError, ToolNotFoundError
from kernelpilot.targets.config import TargetSpec

__all__ = ["RayTarget", "run_job"]


def run_job(operation: str, args: dict[str, Any], files: dict[str, str], blobs: dict[str, bytes],
            name: str) -> dict[str, Any]:
    """A job on this Ray worker: its files laid out in a folder of its own, the operation run confined to it."""
    from kernelpilot.targets.bundle import BlobStore, materialize
    from kernelpilot.tools import ToolContext, call

    with tempfile.TemporaryDirectory(prefix="kpilot-ray-") as tmp:
        store = BlobStore(Path(tmp) / "blobs")
        for digest, data in blobs.items():
            store.put(digest, data)
        job = Path(tmp) / "job"
        materialize(files, store, job)
        try:
            result = call(operation, args, ToolContext(workspace=job, confined=True))
        except KernelpilotError as e:
            from kernelpilot.errors import error_json

            return {"error": error_json(e)}
    node, gpu = None, None
    try:
        import ray

        context = ray.get_runtime_context()
        node = context.get_node_id()
        gpu = ",".join(context.get_accelerator_ids().get("GPU", [])) or None    # the GPU Ray gave the task
    except Exception:  # noqa: BLE001 - where it ran is a courtesy
        pass
    where = {"name": name, "host": socket.gethostname(), "node": node}
    return {"result": result, "target": {**where, "gpu": gpu} if gpu is not None else where}


class RayTarget:
    """Jobs as Ray tasks on the cluster ``spec`` names, at most ``slots`` at once."""

    def __init__(self, spec: TargetSpec, *, slots: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ToolNotFoundError("ray", "Ray (pip install 'kernelpilot[ray]')") from None
        self.ray, self.spec = ray, spec
        # Ray's driver prints its workers' and raylets' messages to standard output; while it is connected they go
        # to standard error, so that a --json result stays the only thing on standard output.
        sys.stdout.flush()
        self._stdout = os.dup(1)
        os.dup2(2, 1)
        address = ("auto" if spec.url in ("auto", "ray:auto") else
                   spec.url.removeprefix("ray:") if not spec.url.startswith("ray://") else spec.url)
        try:
            if not ray.is_initialized():
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            self._restore()
            raise KernelpilotError(f"target {spec.name}: no Ray cluster at {address} ({e}).",
                                   hint="Start one (ray start --head) or fix the target's URL.") from None
        res = ray.cluster_resources()
        self.gpus = int(res.get("GPU", 0))
        self.slots = slots or (self.gpus if self.gpus else max(int(res.get("CPU", 1)), 1))
        options = {"num_gpus": 1} if self.gpus else {"num_cpus": 1}
        self.task = ray.remote(max_retries=1, retry_exceptions=False, **options)(run_job)

    def submit(self, operation: str, args: dict[str, Any], bundle) -> Any:
        blobs = {d: bundle.blobs[d] for d in set(bundle.files.values())}
        return self.task.remote(operation, args, dict(bundle.files), blobs, self.spec.name)

    def _restore(self) -> None:
        if self._stdout is not None:
            sys.stdout.flush()
            os.dup2(self._stdout, 1)
            os.close(self._stdout)
            self._stdout = None

    def close(self) -> None:
        try:
            self.ray.shutdown()
        except Exception:  # noqa: BLE001 - a shut-down cluster connection is what we want
            pass
        finally:
            self._restore()
