"""SSH targets, through the OpenSSH client (its keys, agent, ``known_hosts`` and ``~/.ssh/config`` as the user
has them). One master connection per target is kept open for a minute (``ControlMaster``), so a job after the
first costs no new handshake.

``setup`` installs this kernelpilot there: a wheel built here from the running package (``wheel.py``), copied
over the same connection and installed with the target's pip into a folder of its own
(``~/.kpilot/site/BUILD``), with the target's interpreter and its packages (torch, Triton) as they are. What the
target lacks is said by name.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from kernelpilot.errors import KernelpilotError, ToolNotFoundError
from kernelpilot.targets.config import TargetSpec

__all__ = ["ssh_base", "serve_command", "setup", "site_dir", "REQUIRED"]

# What a target's interpreter must import to run candidates (the package to install for each).
REQUIRED = {"torch": "torch", "triton": "triton", "numpy": "numpy", "yaml": "pyyaml", "click": "click"}


def _ssh() -> str:
    import shutil

    found = shutil.which("ssh")
    if not found:
        raise ToolNotFoundError("ssh", "the OpenSSH client (Debian: openssh-client)")
    return found


def _control_dir() -> Path:
    d = Path(os.environ.get("XDG_RUNTIME_DIR") or Path.home() / ".kpilot") / "kpilot-ssh"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def ssh_base(spec: TargetSpec) -> list[str]:
    """``ssh`` with the options every connection to ``spec`` uses, ending with the destination.
    ``KPILOT_SSH_CONFIG`` names an ssh config file to use instead of ``~/.ssh/config`` (its known hosts, keys and
    aliases): OpenSSH finds the user's files through the password database, not ``$HOME``."""
    config = os.environ.get("KPILOT_SSH_CONFIG")
    cmd = [_ssh(), *(["-F", config] if config else []), "-o", "BatchMode=yes", "-o", "ControlMaster=auto", "-o", f"ControlPath={_control_dir()}/%C",
           "-o", "ControlPersist=60", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
    if spec.port:
        cmd += ["-p", str(spec.port)]
    if spec.identity:
        cmd += ["-i", os.path.expanduser(spec.identity), "-o", "IdentitiesOnly=yes"]
    cmd.append(f"{spec.user}@{spec.host}" if spec.user else spec.host)
    return cmd


def _there(spec: TargetSpec, *parts: str) -> str:
    """A path in the target's folder, for its shell (``~`` left for it to expand)."""
    base = spec.dir.rstrip("/")
    quoted = base if base.startswith("~") and " " not in base else shlex.quote(base)
    return "/".join([quoted, *parts])


def site_dir(spec: TargetSpec, build: str) -> str:
    return _there(spec, "site", build)


def serve_command(spec: TargetSpec, build: str, gpu: int | None = None) -> list[str]:
    """The argv that starts ``targets/serve.py`` there, with the installed kernelpilot of ``build`` first on the
    path (and pinned to one GPU, where ``gpu`` is given)."""
    pin = f"CUDA_VISIBLE_DEVICES={int(gpu)} HIP_VISIBLE_DEVICES={int(gpu)} " if gpu is not None else ""
    remote = (f"{pin}PYTHONPATH={site_dir(spec, build)} exec {shlex.quote(spec.python)} -m kernelpilot.targets.serve "
              f"--root {_there(spec, 'target')}")
    return [*ssh_base(spec), remote]


def _remote(spec: TargetSpec, command: str, *, stdin: bytes | None = None, timeout: float = 600.0
            ) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([*ssh_base(spec), command], input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise KernelpilotError(f"target {spec.name}: `{command[:80]}` took over {timeout:.0f} s.") from None


def _unreachable(spec: TargetSpec, p: subprocess.CompletedProcess) -> KernelpilotError:
    last = (p.stderr.decode(errors="replace").strip().splitlines() or [f"exit status {p.returncode}"])[-1]
    return KernelpilotError(f"target {spec.name} ({spec.url}): {last}",
                            hint="Check that `ssh` reaches it without a password (a key, or the agent).")


def setup(spec: TargetSpec, *, say=print) -> dict[str, object]:
    """Install this kernelpilot on ``spec`` and check what it needs; what was done."""
    from kernelpilot.targets.serve import build_id
    from kernelpilot.targets.wheel import build_wheel

    build = build_id()
    probe = _remote(spec, f"{shlex.quote(spec.python)} -c 'import sys; print(sys.version.split()[0])'", timeout=60)
    if probe.returncode == 255:
        raise _unreachable(spec, probe)
    if probe.returncode != 0:
        raise KernelpilotError(f"target {spec.name}: no Python at {spec.python!r} there.",
                               hint=f"Give one with `kpilot target add {spec.name} {spec.url} --python PATH`.")
    version = probe.stdout.decode().strip()
    if tuple(int(x) for x in version.split(".")[:2]) < (3, 11):
        raise KernelpilotError(f"target {spec.name}: Python {version} there; kernelpilot needs 3.11 or newer.")
    wheel = build_wheel()
    say(f"built {wheel.name} ({wheel.stat().st_size // 1024} KiB)")
    site, remote_wheel = site_dir(spec, build), _there(spec, "wheels", wheel.name)
    copy = _remote(spec, f"mkdir -p {_there(spec, 'wheels')} && cat > {remote_wheel}", stdin=wheel.read_bytes())
    if copy.returncode:
        raise _unreachable(spec, copy)
    install = _remote(spec, f"{shlex.quote(spec.python)} -m pip install --quiet --no-deps --no-index --upgrade "
                            f"--target {site} {remote_wheel}")
    if install.returncode:
        err = install.stderr.decode(errors="replace").strip().splitlines()
        raise KernelpilotError(f"target {spec.name}: pip could not install the wheel: "
                               f"{err[-1] if err else install.returncode}",
                               hint="The target's Python needs pip (python -m ensurepip).")
    say(f"installed kernelpilot {build} into {site}")
    check = ("import importlib.util, json; print(json.dumps([m for m in " + repr(list(REQUIRED))
             + " if importlib.util.find_spec(m) is None]))")
    missing_p = _remote(spec, f"PYTHONPATH={site} {shlex.quote(spec.python)} -c {shlex.quote(check)}", timeout=120)
    import json

    try:
        missing = json.loads(missing_p.stdout.decode() or "[]")
    except json.JSONDecodeError:
        missing = []
    if missing:
        packages = " ".join(REQUIRED[m] for m in missing)
        raise KernelpilotError(f"target {spec.name}: kernelpilot is installed, but its Python lacks {', '.join(missing)}.",
                               hint=f"Install them there: {spec.python} -m pip install {packages}")
    return {"target": spec.name, "build": build, "site": site, "python": version}
