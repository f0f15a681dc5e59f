"""A wheel of the running kernelpilot, built here from its own files (no build backend, no network): what
``kpilot target setup`` installs on a target, so that both ends run the same code. Its version carries the
code's hash (``0.1.0+1a2b3c4d5e6f``): a target whose build differs is told so."""

from __future__ import annotations

import base64
import hashlib
import tempfile
import zipfile
from pathlib import Path

__all__ = ["build_wheel"]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(out_dir: Path | None = None) -> Path:
    """Write ``kernelpilot-VERSION-py3-none-any.whl`` into ``out_dir`` (a temporary folder by default)."""
    from kernelpilot.targets.serve import build_id

    pkg = Path(__file__).resolve().parents[1]
    version = build_id()
    dist = f"kernelpilot-{version}.dist-info"
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="kpilot-wheel-"))
    path = out_dir / f"kernelpilot-{version}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        def add(name: str, data: bytes) -> None:
            z.writestr(name, data)
            records.append(f"{name},{_record_hash(data)},{len(data)}")

        for f in sorted(pkg.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".pyc", ".pyo"):
                add(f"kernelpilot/{f.relative_to(pkg).as_posix()}", f.read_bytes())
        add(f"{dist}/METADATA", (f"Metadata-Version: 2.1\nName: kernelpilot\nVersion: {version}\n"
                                 "Summary: GPU kernel optimization toolkit\nRequires-Python: >=3.11\n").encode())
        add(f"{dist}/WHEEL", b"Wheel-Version: 1.0\nGenerator: kernelpilot\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        add(f"{dist}/entry_points.txt", b"[console_scripts]\nkpilot = kernelpilot.cli.main:main\n")
        records.append(f"{dist}/RECORD,,")
        z.writestr(f"{dist}/RECORD", "\n".join(records) + "\n")
    return path
