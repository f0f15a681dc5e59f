"""Named targets: where jobs run. ``local`` (this machine: every visible GPU, or the CPU) is always there; others
are added with ``kpilot target add NAME URL`` and kept in ``[targets.NAME]`` tables of ``.kpilot/config.toml``
(the project's) or, with ``--user``, of the user's ``kpilot/config.toml`` (``$XDG_CONFIG_HOME``, else
``~/.config``). A project's target of a name overrides the user's.

    [targets.h200]
    url = "ssh://me@gpu-box:2222"
    identity = "~/.ssh/id_ed25519"     # optional: the key, as OpenSSH takes it (-i)
    python = "/opt/venv/bin/python"    # optional: the interpreter there (default python3)
    dir = "/scratch/me/kpilot"          # optional: the folder there for kernelpilot's files (default ~/.kpilot)

    [targets.cluster]
    url = "ray://head:10001"            # Ray Client; or "ray:head:6379" (the GCS address, from a node), "ray:auto"
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from kernelpilot.errors import KernelpilotError, UsageError

__all__ = ["TargetSpec", "load_targets", "get_target", "save_target", "remove_target", "project_config",
           "user_config"]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")


@dataclass(frozen=True)
class TargetSpec:
    name: str
    kind: str                         # local | ssh | ray
    url: str = ""
    host: str = ""
    user: str | None = None
    port: int | None = None
    identity: str | None = None
    python: str = "python3"
    dir: str = "~/.kpilot"            # SSH: the folder there for kernelpilot's files (its install, jobs, blobs)
    origin: str = "built-in"          # the config file it came from

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "url": self.url, "host": self.host, "user": self.user,
                "port": self.port, "identity": self.identity, "python": self.python, "dir": self.dir,
                "origin": self.origin}


LOCAL = TargetSpec("local", "local", "local:", host="localhost")


def project_config() -> Path:
    return Path(".kpilot") / "config.toml"


def user_config() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kpilot" / "config.toml"


def parse_url(name: str, url: str, *, identity: str | None = None, python: str | None = None,
              dir: str | None = None, origin: str = "") -> TargetSpec:
    """A target from its URL: ``ssh://[user@]host[:port]``, ``ray://host:port`` or ``ray:auto``, ``local:``."""
    if not _NAME.match(name):
        raise UsageError(f"target name {name!r}: letters, digits, '-' and '_', starting with a letter.")
    if url in ("local", "local:"):
        return TargetSpec(name, "local", "local:", host="localhost", origin=origin)
    if url in ("ray:auto", "ray://auto", "auto"):
        return TargetSpec(name, "ray", "auto", origin=origin, python=python or "python3")
    gcs = re.match(r"^ray:([A-Za-z0-9.-]+):(\d+)$", url)
    if gcs:       # a cluster's GCS address: this process joins it as a driver (on one of its nodes)
        return TargetSpec(name, "ray", url, host=gcs.group(1), port=int(gcs.group(2)), origin=origin)
    parts = urlsplit(url)
    if parts.scheme not in ("ssh", "ray") or not parts.hostname:
        raise UsageError(f"target {name}: {url!r} is not ssh://[user@]host[:port], ray://host:port (Ray Client), "
                         "ray:HOST:PORT (a cluster's GCS address, from one of its nodes), ray:auto or local:.")
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"target {name}: {url!r} has a port that is not a number.") from None
    if parts.scheme == "ray":
        return TargetSpec(name, "ray", url, host=parts.hostname, port=port, origin=origin)
    return TargetSpec(name, "ssh", url, host=parts.hostname, user=parts.username, port=port,
                      identity=identity, python=python or "python3", dir=dir or "~/.kpilot", origin=origin)


def _read(path: Path) -> dict[str, TargetSpec]:
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise KernelpilotError(f"{path}: not valid TOML ({e}).") from None
    out = {}
    for name, t in (data.get("targets") or {}).items():
        if not isinstance(t, dict) or not isinstance(t.get("url"), str):
            raise KernelpilotError(f"{path}: [targets.{name}] needs url = \"ssh://...\" (or ray://..., ray:auto).")
        out[name] = parse_url(name, t["url"], identity=t.get("identity"), python=t.get("python"), dir=t.get("dir"),
                              origin=str(path))
    return out


def load_targets() -> dict[str, TargetSpec]:
    """Every target: local, the user's, then the project's (a project's name overrides the user's)."""
    return {"local": LOCAL, **_read(user_config()), **_read(project_config())}


def get_target(name: str | None) -> TargetSpec:
    if name in (None, "", "local"):
        return LOCAL
    targets = load_targets()
    if name not in targets:
        raise UsageError(f"no target named {name!r}; targets: {', '.join(sorted(targets))}.",
                         hint="Add one with `kpilot target add NAME ssh://user@host`.")
    return targets[name]


def _toml_table(spec: TargetSpec) -> str:
    lines = [f"[targets.{spec.name}]", f"url = {json.dumps(spec.url)}"]
    if spec.identity:
        lines.append(f"identity = {json.dumps(spec.identity)}")
    if spec.python and spec.python != "python3":
        lines.append(f"python = {json.dumps(spec.python)}")
    if spec.dir and spec.dir != "~/.kpilot":
        lines.append(f"dir = {json.dumps(spec.dir)}")
    return "\n".join(lines) + "\n"


def _without(text: str, name: str) -> str:
    """``text`` without its ``[targets.NAME]`` table (up to the next table)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("["):
            skipping = stripped in (f"[targets.{name}]", f'[targets."{name}"]')
        if not skipping:
            out.append(line)
    return "".join(out)


def save_target(spec: TargetSpec, path: Path) -> None:
    """Write ``spec`` into ``path``'s targets (replacing one of the same name); the rest of the file is kept."""
    if spec.name == "local":
        raise UsageError("the target name local is this machine's; pick another.")
    text = path.read_text() if path.is_file() else ""
    _read(path)                        # a broken file is said, not overwritten
    text = _without(text, spec.name).rstrip("\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((text + "\n\n" if text else "") + _toml_table(spec))


def remove_target(name: str, path: Path) -> bool:
    if not path.is_file() or name not in _read(path):
        return False
    path.write_text(_without(path.read_text(), name))
    return True
