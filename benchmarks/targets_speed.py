"""Execution targets: how `kpilot eval-batch` scales with workers, and what a job costs over SSH.

- **Batch scaling.** The same batch (CPU candidates of KernelBench's 19_ReLU and the native row softmax, copied
  into KernelBench's generations layout) through `kpilot eval-batch --device cpu` with 1 worker, then with 2;
  the wall time of each and their ratio (target: 2 workers at most 0.6x of 1).
- **SSH overhead** (with --ssh, where openssh-server is installed): an sshd started on 127.0.0.1 with keys made
  here, the target set up, then the same `kpilot check` run locally and through the target, alternating,
  `--repeat` times each; the median difference (target: at most 1 s).

- **A KernelBench batch on a GPU** (with --kernelbench PATH, a KernelBench clone): the first --count level-1
  problems (or those named with --problem), each with its own reference as the candidate (`ModelNew`) and, with
  --compile, the reference under torch.compile; `kpilot eval-batch --device cuda` over all of them, its wall time,
  what passed and fast_p.

Writes benchmarks/results/targets_speed.json. Run: python benchmarks/targets_speed.py [--jobs 8] [--ssh]
[--repeat 5] [--ssh-device cuda] [--device cpu] [--kernelbench PATH [--count 20] [--problem 19_ReLU ...] [--compile]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "problems"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def kp(*args, cwd: Path, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelpilot", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**ENV, **(env or {})}, timeout=timeout)


def batch_tree(root: Path, jobs: int) -> tuple[Path, Path]:
    """``jobs`` candidates: ReLU's Triton and library candidates and the row softmax's Triton one, in turn."""
    problems, cands = root / "problems", root / "cands"
    (problems / "level1").mkdir(parents=True)
    shutil.copy(EXAMPLES / "kernelbench_relu" / "19_ReLU.py", problems / "level1" / "19_ReLU.py")
    shutil.copytree(EXAMPLES / "row_softmax", problems / "level1" / "90_row_softmax")
    pool = [("19", EXAMPLES / "kernelbench_relu" / "candidates" / "relu_triton.py"),
            ("19", EXAMPLES / "kernelbench_relu" / "candidates" / "relu_library.py"),
            ("90", EXAMPLES / "row_softmax" / "candidates" / "triton_softmax.py")]
    for i in range(jobs):
        pid, src = pool[i % len(pool)]
        d = cands / "level1" / pid
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, d / f"sample_{i}.py")
    return problems, cands


def batch_wall(problems: Path, cands: Path, workers: int, cwd: Path) -> dict:
    args = ["eval-batch", problems, cands, "--workers", workers, "--device", "cpu", "--seeds", "1", "--budget",
            "0.1", "--json", "--store", cwd / f"w{workers}.db"]
    t0 = time.perf_counter()
    r = kp(*args, cwd=cwd)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"eval-batch failed: {r.stderr[-500:]}")
    d = json.loads(r.stdout)
    return {"workers": workers, "wall_s": round(wall, 2), "jobs": d["jobs"], "passed": sum(x["passed"] for x in d["rows"]),
            "fast_p": d["fast_p"]}


# The reference itself as the candidate (its own methods name Model: subclassed, not renamed).
_AS_IS = """

class ModelNew(Model):
    pass
"""

_COMPILED = """

class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.forward = torch.compile(super().forward)
"""


def kernelbench_tree(clone: Path, root: Path, count: int, names: list[str], compiled: bool) -> tuple[Path, Path, int]:
    """Level-1 problems of a KernelBench clone in eval-batch's layout, each with its reference as the candidate
    (and, with ``compiled``, the reference under torch.compile): (problems, candidates, how many candidates)."""
    level = clone / "KernelBench" / "level1"
    if not level.is_dir():
        raise SystemExit(f"{clone}: no KernelBench/level1 (point --kernelbench at a KernelBench clone)")
    chosen = sorted(level.glob("*.py"), key=lambda p: int(p.name.split("_", 1)[0]))
    if names:
        chosen = [p for p in chosen if p.stem in names or p.name.split("_", 1)[0] in names]
    chosen = chosen[:count] if not names else chosen
    problems, cands = root / "kb_problems", root / "kb_cands"
    n = 0
    for src in chosen:
        pid = src.name.split("_", 1)[0]
        (problems / "level1").mkdir(parents=True, exist_ok=True)
        shutil.copy(src, problems / "level1" / src.name)
        d = cands / "level1" / pid
        d.mkdir(parents=True, exist_ok=True)
        text = src.read_text()
        (d / "reference.py").write_text(text + _AS_IS)
        n += 1
        if compiled:
            (d / "compiled.py").write_text(text + _COMPILED)
            n += 1
    return problems, cands, n


def kernelbench_batch(clone: Path, count: int, names: list[str], compiled: bool, workers: int, tmp: Path,
                      device: str = "cuda") -> dict:
    problems, cands, n = kernelbench_tree(clone, tmp, count, names, compiled)
    t0 = time.perf_counter()
    r = kp("eval-batch", problems, cands, "--workers", workers, "--device", device, "--json", "--store",
           tmp / "kb.db", cwd=tmp, timeout=3600)
    wall = time.perf_counter() - t0
    if r.returncode not in (0, 3):
        return {"error": r.stderr[-600:], "candidates": n}
    d = json.loads(r.stdout)
    return {"candidates": n, "workers": workers, "wall_s": round(wall, 2), "jobs": d["jobs"],
            "passed": sum(x["passed"] for x in d["rows"]), "fast_p": d["fast_p"],
            "rows": [{k: x.get(k) for k in ("key", "correct", "passed", "speedup", "median_us", "target")}
                     for x in d["rows"]]}


def ssh_overhead(repeat: int, tmp: Path, device: str = "cpu") -> dict:
    daemon = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(daemon).exists():
        return {"skipped": "openssh-server is not installed"}
    d = tmp / "sshd"
    d.mkdir(mode=0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (d / "sshd_config").write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nPidFile {d / 'pid'}\n"
                                   f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\n"
                                   "StrictModes no\nUsePAM no\nLogLevel ERROR\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen([daemon, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        pub = (d / "host.pub").read_text().split()
        (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
        (d / "ssh_config").write_text(f"Host 127.0.0.1\n  UserKnownHostsFile {d / 'known_hosts'}\n")
        env = {"KPILOT_SSH_CONFIG": str(d / "ssh_config")}
        project = tmp / "project"
        project.mkdir()
        user = os.environ.get("USER") or "root"
        kp("target", "add", "here", f"ssh://{user}@127.0.0.1:{port}", "--identity", d / "client", "--python",
           sys.executable, "--dir", d / "remote", cwd=project, env=env)
        setup = kp("target", "setup", "here", cwd=project, env=env)
        if setup.returncode:
            return {"error": setup.stderr[-400:]}
        row = EXAMPLES / "row_softmax"
        job = ["check", row, "-c", row / "candidates" / "triton_softmax.py", "--device", device, "--seeds", "1",
               "--case", "rows=64,cols=128,dtype=float32", "--json"]
        local, remote = [], []
        for _ in range(repeat):
            for where, times in ((None, local), ("here", remote)):
                t0 = time.perf_counter()
                r = kp(*job, *(["--target", where] if where else []), cwd=project, env=env)
                times.append(time.perf_counter() - t0)
                if r.returncode:
                    return {"error": r.stderr[-400:]}
        return {"device": device, "local_s": [round(t, 2) for t in local], "ssh_s": [round(t, 2) for t in remote],
                "median_local_s": round(statistics.median(local), 2), "median_ssh_s": round(statistics.median(remote), 2),
                "overhead_s": round(statistics.median(remote) - statistics.median(local), 2)}
    finally:
        proc.terminate()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--ssh", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ssh-device", default="cpu", choices=["cpu", "cuda"], help="where the --ssh check runs")
    ap.add_argument("--kernelbench", type=Path, help="a KernelBench clone: also time a GPU batch of its level 1")
    ap.add_argument("--count", type=int, default=20, help="level-1 problems in the KernelBench batch")
    ap.add_argument("--problem", action="append", default=[], help="only these level-1 problems (name or number)")
    ap.add_argument("--compile", action="store_true", help="also each reference under torch.compile")
    ap.add_argument("--workers", type=int, default=1, help="workers of the KernelBench batch (one per GPU)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="where the KernelBench batch runs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kpilot-targets-") as tmp:
        tmp = Path(tmp)
        if args.kernelbench:
            payload = {"kernelbench_batch": kernelbench_batch(args.kernelbench, args.count, args.problem,
                                                              args.compile, args.workers, tmp, args.device)}
            write_results("targets_kernelbench", payload)
            print(json.dumps({k: v for k, v in payload["kernelbench_batch"].items() if k != "rows"}, indent=2))
            return
        problems, cands = batch_tree(tmp, args.jobs)
        kp("eval-batch", problems, cands, "--workers", 1, "--device", "cpu", "--seeds", "1", "--budget", "0.1",
           "--json", "--store", tmp / "warm.db", cwd=tmp)   # caches warm
        one = batch_wall(problems, cands, 1, tmp)
        two = batch_wall(problems, cands, 2, tmp)
        payload = {"batch": {"one_worker": one, "two_workers": two,
                             "ratio": round(two["wall_s"] / one["wall_s"], 3)}}
        if args.ssh:
            payload["ssh"] = ssh_overhead(args.repeat, tmp, args.ssh_device)
    write_results("targets_speed", payload)
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
