"""What a candidate may return, and how its outputs travel to the reference's process.

An output is a plain ``torch.Tensor`` (not a subclass, strided, holding data), a plain Python scalar (``None``,
``bool``, ``int``, ``float``, ``complex``, ``str``), or tuples, lists and dicts (with string or integer keys) of
these. Nothing else: an object of any other class could compute lazily inside the checker, compare equal to
anything, or run code in the reference's process when it is loaded there.

Outputs cross processes as data only: a folder with ``index.json`` (the structure, scalars, and each tensor's
dtype, shape and file) and one file of raw bytes per tensor. Nothing in it is ever executed or unpickled, so
the reference can read what a hostile process wrote; what it reads is checked again (structure, dtypes, sizes),
since the candidate's process could have rewritten the folder. Tensors are written from the device through a
pinned staging buffer (no pageable copy of many GB) and read back by mapping their files, so a tensor's bytes
are read only when they are compared.

Runs only in worker processes (imports torch).
"""

from __future__ import annotations

import json
import mmap
import os
import queue
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["plain_output", "save_outputs", "load_outputs", "OutputsRejected", "Rejected", "MAX_LEAVES", "MAX_DEPTH",
           "FORMAT", "to_device"]

MAX_LEAVES = 10_000
MAX_DEPTH = 32
_SCALARS = (type(None), bool, int, float, complex, str)
FORMAT = "kernelpilot.outputs/1"
_INDEX = "index.json"
_INDEX_LIMIT = 64 << 20          # an index larger than this was not written by the harness


def plain_output(obj: Any, name: str = "out") -> str | None:
    """Why ``obj`` is not an acceptable output (one line naming the part that is not), or None."""
    import torch

    leaves = 0

    def walk(x: Any, path: str, depth: int) -> str | None:
        nonlocal leaves
        if depth > MAX_DEPTH:
            return f"{path} is nested more than {MAX_DEPTH} levels deep"
        if type(x) in (tuple, list):
            items = enumerate(x)
        elif type(x) is dict:
            for k in x:
                if type(k) not in (str, int):
                    return f"{path} has a key of type {type(k).__name__} (keys must be str or int)"
            items = x.items()
        else:
            leaves += 1
            if leaves > MAX_LEAVES:
                return f"{name} has more than {MAX_LEAVES} leaves"
            if isinstance(x, torch.Tensor):
                if type(x) is not torch.Tensor:
                    return f"{path} is a {type(x).__module__}.{type(x).__qualname__} (a tensor subclass)"
                if x.layout != torch.strided:
                    return f"{path} is a {str(x.layout).replace('torch.', '')} tensor (outputs are strided tensors)"
                if x.is_meta:
                    return f"{path} is a meta tensor (it holds no data)"
                return None
            if type(x) in _SCALARS:
                return None
            kind = f"{type(x).__module__}.{type(x).__qualname__}"
            return (f"{path} is a {kind}: outputs are tensors, plain numbers and strings, or tuples, lists and "
                    "dicts of them")
        for k, v in items:
            why = walk(v, f"{path}[{k!r}]", depth + 1)
            if why:
                return why
        return None

    return walk(obj, name, 0)


def save_outputs(outputs: dict[str, Any], folder: Path) -> None:
    """Write ``{key: output}`` (each already checked with ``plain_output``; tensors on any device) into
    ``folder``: the tensors' bytes first, the index last, so a folder without an index was not finished."""
    folder.mkdir(parents=True, exist_ok=True)
    files: list[Any] = []

    def tree(x: Any) -> Any:
        if type(x) in (tuple, list):
            return {"t": type(x).__name__, "items": [tree(y) for y in x]}
        if type(x) is dict:
            return {"t": "dict", "items": [[["s" if type(k) is str else "i", str(k)], tree(v)] for k, v in x.items()]}
        if x is None:
            return {"t": "none"}
        if type(x) is bool:
            return {"t": "bool", "v": x}
        if type(x) is int:
            return {"t": "int", "v": str(x)}
        if type(x) is float:
            return {"t": "float", "v": x.hex()}
        if type(x) is complex:
            return {"t": "complex", "v": [x.real.hex(), x.imag.hex()]}
        if type(x) is str:
            return {"t": "str", "v": x}
        name = f"{len(files)}.bin"
        files.append((name, x))
        return {"t": "tensor", "dtype": str(x.dtype).replace("torch.", ""), "shape": list(x.shape), "file": name}

    index = {"format": FORMAT, "outputs": {str(k): tree(v) for k, v in outputs.items()}}
    for name, t in files:
        _write_tensor(folder / name, t)
    tmp = folder / (_INDEX + ".tmp")
    tmp.write_text(json.dumps(index))
    os.replace(tmp, folder / _INDEX)


def _write_tensor(path: Path, t: Any) -> None:
    """A tensor's bytes in row-major order, written a piece at a time on a few threads (from a GPU through
    pinned buffers)."""
    import torch

    flat = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    data = flat.view(torch.uint8) if flat.numel() else None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if data is None:
            return
        on_host = data.device.type == "cpu"
        host = data.numpy() if on_host else None

        def piece(start: int, stop: int) -> None:
            if on_host:
                _pwrite_all(fd, memoryview(host[start:stop]), start)
                return
            with _pinned(stop - start) as b:
                b.copy_(data[start:stop])
                _pwrite_all(fd, memoryview(b.numpy()), start)

        _in_pieces(data.numel(), piece)
    finally:
        os.close(fd)


def to_device(value: Any, device: str) -> Any:
    """``value`` (as ``load_outputs`` read it) with every tensor on ``device``: read from its mapped file a piece at
    a time on a few threads, through pinned buffers, rather than by one pageable copy."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or not str(device).startswith("cuda") or not value.numel():
            return value.to(device)
        src = value.contiguous().reshape(-1).view(torch.uint8)
        out = torch.empty(value.shape, dtype=value.dtype, device=device)
        dst = out.reshape(-1).view(torch.uint8)

        def piece(start: int, stop: int) -> None:
            with _pinned(stop - start) as b:
                b.copy_(src[start:stop])
                dst[start:stop].copy_(b)

        _in_pieces(src.numel(), piece)
        return out
    if type(value) in (tuple, list):
        return type(value)(to_device(x, device) for x in value)
    if type(value) is dict:
        return {k: to_device(v, device) for k, v in value.items()}
    return value


# Pieces of this size go between the device and the files on this many threads (each with a pinned buffer of
# its own): host copies and file I/O release the GIL, so several pieces move at once.
_PIECE_BYTES = 32 << 20
_THREADS = 4
_buffers: list[queue.SimpleQueue] = []
_making_buffers = threading.Lock()        # the first pieces arrive on several threads at once


@contextmanager
def _pinned(n: int):
    """``n`` bytes of one of the pinned buffers, this thread's until the block ends."""
    with _making_buffers:
        if not _buffers:
            import torch

            q: queue.SimpleQueue = queue.SimpleQueue()
            for _ in range(_THREADS):
                q.put(torch.empty(_PIECE_BYTES, dtype=torch.uint8, pin_memory=True))
            _buffers.append(q)
    buf = _buffers[0].get()
    try:
        yield buf[:n]
    finally:
        _buffers[0].put(buf)


def _in_pieces(n: int, piece) -> None:
    spans = [(s, min(n, s + _PIECE_BYTES)) for s in range(0, n, _PIECE_BYTES)]
    if len(spans) == 1:
        piece(*spans[0])
        return
    with ThreadPoolExecutor(_THREADS) as ex:
        for _ in ex.map(lambda span: piece(*span), spans):
            pass


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view.nbytes:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def load_outputs(folder: Path) -> dict[str, Any]:
    """The outputs a candidate's worker saved in ``folder`` (or in its subfolders, one per save), read as data
    and mapped rather than read (a tensor's bytes are read when they are compared); each key whose value is
    malformed or not a plain output maps to a one-line reason (a ``str`` subclass, ``Rejected``) instead.
    Raises ``OutputsRejected`` for a folder the harness did not write."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise OutputsRejected(f"the candidate's outputs folder could not be opened: {e.strerror or e}") from None
    try:
        names = os.listdir(fd)
        if _INDEX not in names:
            out: dict[str, Any] = {}
            for sub in sorted(names):
                if not sub.startswith(".") and stat.S_ISDIR(os.stat(sub, dir_fd=fd, follow_symlinks=False).st_mode):
                    out.update(load_outputs(folder / sub))
            return out
        return _load_index(fd, folder)
    finally:
        os.close(fd)


def _load_index(dir_fd: int, folder: Path) -> dict[str, Any]:
    raw = _read_small(dir_fd, _INDEX)
    try:
        index = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise OutputsRejected(f"{folder.name}/{_INDEX} is not valid JSON: {str(e)[:200]}") from None
    if type(index) is not dict or index.get("format") != FORMAT or type(index.get("outputs")) is not dict:
        raise OutputsRejected(f"{folder.name}/{_INDEX} is not the harness's table of outputs ({FORMAT})")
    out: dict[str, Any] = {}
    for key, entry in index["outputs"].items():
        try:
            value = _build(entry, dir_fd, 0)
        except _Malformed as e:
            out[str(key)] = Rejected(f"its saved form is malformed: {e}")
            continue
        why = plain_output(value)
        out[str(key)] = Rejected(why) if why else value
    return out


class _Malformed(Exception):
    pass


def _build(node: Any, dir_fd: int, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise _Malformed(f"nested more than {MAX_DEPTH} levels deep")
    if type(node) is not dict or type(node.get("t")) is not str:
        raise _Malformed("an entry is not an object with a type")
    kind, v = node["t"], node.get("v")
    try:
        if kind in ("list", "tuple"):
            items = [_build(x, dir_fd, depth + 1) for x in _list(node.get("items"))]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            d: dict[Any, Any] = {}
            for pair in _list(node.get("items")):
                (ktype, k), value = pair
                if ktype not in ("s", "i") or type(k) is not str or len(k) > 5000:
                    raise _Malformed("a dict key is not a string or an integer")
                d[k if ktype == "s" else int(k)] = _build(value, dir_fd, depth + 1)
            return d
        if kind == "none":
            return None
        if kind == "bool" and type(v) is bool:
            return v
        if kind == "int" and type(v) is str and len(v) <= 5000:
            return int(v)
        if kind == "float" and type(v) is str:
            return float.fromhex(v)
        if kind == "complex":
            re_, im = v
            return complex(float.fromhex(re_), float.fromhex(im))
        if kind == "str" and type(v) is str:
            return v
        if kind == "tensor":
            return _read_tensor(node, dir_fd)
    except (TypeError, ValueError, OverflowError) as e:
        raise _Malformed(f"a {kind} entry: {str(e)[:120]}") from None
    raise _Malformed(f"an entry of type {kind!r}")


def _list(x: Any) -> list:
    if type(x) is not list:
        raise _Malformed("items are not a list")
    return x


def _read_tensor(node: dict, dir_fd: int) -> Any:
    import torch

    dtype = getattr(torch, str(node.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise _Malformed(f"unknown dtype {str(node.get('dtype'))[:40]!r}")
    shape = node.get("shape")
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
        raise _Malformed("a tensor's shape is not a list of sizes")
    numel = 1
    for n in shape:
        numel *= n
    nbytes = numel * dtype.itemsize
    name = node.get("file")
    if type(name) is not str or "/" in name or name.startswith("."):
        raise _Malformed("a tensor's file is not a name in the folder")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as e:
        raise _Malformed(f"{name}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Malformed(f"{name} is not a regular file")
        if st.st_size != nbytes:
            raise _Malformed(f"{name} holds {st.st_size} bytes, not the {nbytes} of a {tuple(shape)} "
                             f"{str(dtype).replace('torch.', '')} tensor")
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        # A private mapping: the bytes are read from the file as they are touched, and nothing written to
        # the tensor reaches the file.
        buf = mmap.mmap(fd, nbytes, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    return torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(shape)


def _read_small(dir_fd: int, name: str) -> bytes:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as e:
        raise OutputsRejected(f"{name} could not be opened: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutputsRejected(f"{name} is not a regular file")
        data = os.read(fd, _INDEX_LIMIT + 1)
    finally:
        os.close(fd)
    if len(data) > _INDEX_LIMIT:
        raise OutputsRejected(f"{name} is larger than {_INDEX_LIMIT >> 20} MiB: not the harness's")
    return data


class OutputsRejected(Exception):
    """The outputs folder is not one the harness wrote (it cannot be read as the harness's table of outputs)."""


class Rejected(str):
    """Why an output read back from a file is not a plain output."""
