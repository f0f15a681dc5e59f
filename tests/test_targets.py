"""Execution targets, with real parts: a `serve` process over pipes (the local target), and an OpenSSH server
started here on 127.0.0.1 with keys made for the test (the SSH target): add, setup, test, then check, eval and
profile through it on the CPU, with the results saying where they ran."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, free_port, in_ci, require_module

from kernelpilot.errors import KernelpilotError
from kernelpilot.targets.bundle import BlobStore, make_bundle, materialize

ROW = EXAMPLES / "problems" / "row_softmax"
GOOD = ROW / "candidates" / "triton_softmax.py"
SMALL = "rows=64,cols=128,dtype=float32"
GM = EXAMPLES / "problems" / "gpumode_vectoradd"


def test_a_bundle_is_content_addressed_and_lays_out_the_same(tmp_path):
    b = make_bundle(ROW, GOOD, ("eager", str(ROW / "candidates" / "triton_softmax_tunable.py")))
    assert b.problem == "problem" and b.candidate == "candidate/triton_softmax.py"
    assert "problem/problem.toml" in b.files and "problem/reference.py" in b.files
    assert b.baselines == {str(ROW / "candidates" / "triton_softmax_tunable.py"): "baselines/1/triton_softmax_tunable.py"}
    store = BlobStore(tmp_path / "blobs")
    assert store.missing(list(b.files.values())) == sorted(set(b.files.values()))
    for digest, data in b.blobs.items():
        store.put(digest, data)
    assert store.missing(list(b.files.values())) == []
    materialize(b.files, store, tmp_path / "job")
    assert (tmp_path / "job" / "problem" / "problem.toml").read_bytes() == (ROW / "problem.toml").read_bytes()
    with pytest.raises(KernelpilotError, match="does not match its hash"):
        store.put("0" * 64, b"x")
    with pytest.raises(KernelpilotError, match="leaves the job's folder"):
        materialize({"../outside.py": next(iter(b.files.values()))}, store, tmp_path / "job2")
    # GPU MODE's task.yml may take files from the folder above: the bundle keeps the layout
    g = make_bundle(GM, GM / "submission_triton.py")
    assert g.problem == "problem" and "problem/task.yml" in g.files


def _kp(*args, cwd=None, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "kernelpilot", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})},
                          timeout=timeout)


def test_the_local_target_runs_a_job_through_a_serve_process():
    require_module("triton")
    from kernelpilot.targets.config import LOCAL
    from kernelpilot.targets.dispatch import open_channels, remote_options
    from kernelpilot.tools.evaluate import EvalRequest

    opts = EvalRequest(problem=ROW, candidate=GOOD, device="cpu", seeds=1, cases=[SMALL])
    bundle = make_bundle(ROW, GOOD)
    (channel,) = open_channels(LOCAL, slots=1)
    try:
        events = []
        result = channel.run("check", remote_options("check", opts, bundle), bundle, events.append)
        assert result["passed"] and result["target"]["host"] == socket.gethostname()
        assert [e["stage"] for e in events][:1] == ["candidate"]
        again = channel.ship(bundle)
        assert again == 0                          # the target holds every file already: nothing is sent again
    finally:
        channel.close()
    with pytest.raises(KernelpilotError, match="cannot reach"):
        remote_options("check", opts.replace(keep=Path("/tmp/x")), bundle)
    with pytest.raises(KernelpilotError,
                       match="no-sandbox: a target, and so every eval-batch worker, runs each candidate in its box"):
        remote_options("check", opts.replace(sandbox=False), bundle)


# ------------------------------------------------------------------ a real sshd on 127.0.0.1


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """An OpenSSH server on 127.0.0.1, for this user, with a host key and a client key made here."""
    daemon = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    if daemon is None or not shutil.which("ssh-keygen"):
        if in_ci():
            pytest.fail("CI: sshd (openssh-server) is missing")
        pytest.skip("sshd (openssh-server) is not installed")
    d = tmp_path_factory.mktemp("sshd")
    os.chmod(d, 0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    port = free_port()
    config = d / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nPidFile {d / 'sshd.pid'}\n"
                      f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\n"
                      "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nStrictModes no\nUsePAM no\n"
                      "AcceptEnv LANG\nLogLevel ERROR\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen([daemon, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"sshd did not start: {proc.stderr.read().decode()[-500:]}")
            time.sleep(0.1)
    # known_hosts for this server only, in a private ssh config the client is pointed at (KPILOT_SSH_CONFIG)
    pub = (d / "host.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    (d / "ssh_config").write_text(f"Host 127.0.0.1\n  UserKnownHostsFile {d / 'known_hosts'}\n"
                                  "  StrictHostKeyChecking yes\n")
    yield {"port": port, "key": d / "client", "config": d / "ssh_config", "dir": d / "remote"}
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def ssh_project(sshd, tmp_path_factory):
    """A project folder with the target added (its config in .kpilot/) and set up."""
    require_module("triton")
    project = tmp_path_factory.mktemp("project")
    env = {"KPILOT_SSH_CONFIG": str(sshd["config"])}        # the client's known_hosts: this server's key
    user = os.environ.get("USER") or __import__("getpass").getuser()
    r = _kp("target", "add", "box", f"ssh://{user}@127.0.0.1:{sshd['port']}", "--identity", sshd["key"],
            "--python", sys.executable, "--dir", sshd["dir"], cwd=project, env=env)
    assert r.returncode == 0, r.stderr
    r = _kp("target", "setup", "box", "--json", cwd=project, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    setup = json.loads(r.stdout)
    assert setup["site"].endswith(setup["build"]) and (sshd["dir"] / "site" / setup["build"] / "kernelpilot").is_dir()
    return project, env


def test_an_ssh_target_runs_check_eval_and_profile(ssh_project, sshd):
    project, env = ssh_project
    r = _kp("target", "test", "box", "--json", cwd=project, env=env)
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)
    assert t["host"] == socket.gethostname() and t["device"] in (None, "cpu")
    common = [ROW, "-c", GOOD, "--device", "cpu", "--case", SMALL, "--target", "box", "--json"]
    r = _kp("check", *common, "--seeds", "1", cwd=project, env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["passed"] and d["target"]["name"] == "box" and d["target"]["host"] == socket.gethostname()
    assert any(json.loads(line).get("stage") == "case" for line in r.stderr.splitlines())   # events came back
    r = _kp("eval", *common, "--seeds", "1", "--budget", "0.05", cwd=project, env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["passed"] and d["bench"] and d["target"]["name"] == "box"
    wrong = _kp("check", ROW, "-c", ROW / "cheats" / "precision_downgrade.py", *common[3:], "--seeds", "1",
                cwd=project, env=env)
    assert wrong.returncode == 3 and not json.loads(wrong.stdout)["passed"]
    # the job's files stayed there: the blobs, and no job folder left behind
    assert any((sshd["dir"] / "target" / "blobs").rglob("*")) and not any((sshd["dir"] / "target" / "jobs").iterdir())
    human = _kp("check", *common[:-1], "--seeds", "1", cwd=project, env=env)
    assert human.returncode == 0 and "PASSED" in human.stdout, human.stderr


def test_an_unreachable_or_stale_target_is_one_line(ssh_project, sshd, tmp_path):
    project, env = ssh_project
    r = _kp("target", "add", "gone", "ssh://nobody@127.0.0.1:1", cwd=project, env=env)
    assert r.returncode == 0
    r = _kp("check", ROW, "-c", GOOD, "--device", "cpu", "--target", "gone", cwd=project, env=env, timeout=120)
    assert r.returncode == 1 and r.stderr.startswith("error: target gone") and "Traceback" not in r.stderr
    r = _kp("check", ROW, "-c", GOOD, "--target", "nowhere", cwd=project, env=env)
    assert r.returncode == 2 and "no target named 'nowhere'" in r.stderr
    # a build that differs from this one is refused with what to do
    stale = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "kernelpilot", stale / "kernelpilot", ignore=shutil.ignore_patterns("__pycache__"))
    (stale / "kernelpilot" / "targets" / "extra_note.py").write_text("# a change\n")
    r = subprocess.run([sys.executable, "-m", "kernelpilot", "target", "test", "box"], capture_output=True,
                       text=True, cwd=project, env={**os.environ, **env, "PYTHONPATH": str(stale)}, timeout=120)
    assert r.returncode == 1 and "kpilot target setup box" in r.stderr
    r = _kp("target", "remove", "gone", cwd=project, env=env)
    assert r.returncode == 0 and "removed gone" in r.stdout


# ------------------------------------------------------------------ eval-batch on local CPU workers


def _batch_tree(tmp_path: Path) -> tuple[Path, Path]:
    relu = EXAMPLES / "problems" / "kernelbench_relu"
    problems, cands = tmp_path / "problems", tmp_path / "cands"
    (problems / "level1").mkdir(parents=True)
    shutil.copy(relu / "19_ReLU.py", problems / "level1" / "19_ReLU.py")
    samples = {"sample_0": "relu_triton.py", "sample_1": "relu_wrong.py", "sample_2": "relu_library.py",
               "sample_3": "relu_triton.py"}
    for sample, name in samples.items():
        (cands / "level1" / "19").mkdir(parents=True, exist_ok=True)
        shutil.copy(relu / "candidates" / name, cands / "level1" / "19" / f"{sample}.py")
    (cands / "level1" / "77").mkdir(parents=True)
    shutil.copy(relu / "candidates" / "relu_triton.py", cands / "level1" / "77" / "sample_0.py")
    return problems, cands


def test_eval_batch_on_two_workers_records_everything_and_resumes(tmp_path):
    require_module("triton")
    problems, cands = _batch_tree(tmp_path)
    r = _kp("eval-batch", problems, cands, "--workers", "2", "--device", "cpu", "--seeds", "1", "--budget", "0.05",
            "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["jobs"] == 4 and d["evaluated"] == 4 and d["workers"] == 2 and d["orphans"] == ["level1/77/sample_0.py"]
    by = {row["key"]: row for row in d["rows"]}
    assert not by["level1/19/sample_1"]["correct"] and by["level1/19/sample_0"]["correct"]
    assert d["fast_p"]["fast_0"] == 0.75 and all(row["target"]["name"] == "local" for row in d["rows"])
    events = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    assert [e["done"] for e in events if e.get("stage") == "batch"] == [1, 2, 3, 4]
    again = _kp("eval-batch", problems, cands, "--resume", str(d["run"]), "--device", "cpu", "--json", cwd=tmp_path)
    resumed = json.loads(again.stdout)
    assert again.returncode == 0 and resumed["evaluated"] == 0 and len(resumed["rows"]) == 4


def test_workers_keep_to_the_problems_they_have_set_up():
    """Each worker process keeps a problem's reference worker, reference outputs and baseline timings: two workers
    on two problems take one each, and a worker left idle takes over the larger one's rest."""
    import threading

    from kernelpilot.targets.dispatch import spread

    ran: dict[str, list[str]] = {"a": [], "b": []}
    gate = threading.Barrier(2)

    def work(channel, item):
        if not ran[channel]:
            gate.wait(timeout=10)           # both workers have taken their first item before either goes on
        ran[channel].append(item)
        time.sleep(0.02 if item.startswith("small") else 0.05)
        return item

    items = [f"big{i}" for i in range(8)] + [f"small{i}" for i in range(2)]
    out = list(spread(items, ["a", "b"], work, group=lambda item: item.rstrip("0123456789")))
    assert sorted(value for _, value, _ in out) == sorted(items)
    first = {c: {x.rstrip("0123456789") for x in ran[c][:1]} for c in ran}
    assert first["a"] != first["b"]                      # one problem each to begin with
    small = "a" if first["a"] == {"small"} else "b"
    assert [x for x in ran[small] if x.startswith("small")] == ["small0", "small1"]   # its own first, then the rest
    assert all(x.startswith("big") for x in ran["b" if small == "a" else "a"])          # the other never set up small


def test_a_worker_killed_mid_batch_loses_nothing(tmp_path):
    require_module("triton")
    import signal
    import threading

    from kernelpilot.targets.batch import find_jobs, run_batch
    from kernelpilot.targets.config import LOCAL
    from kernelpilot.targets.dispatch import open_channels, remote_options
    from kernelpilot.tools.evaluate import EvalRequest

    problems, cands = _batch_tree(tmp_path)
    jobs, _ = find_jobs(problems, cands)
    channels = open_channels(LOCAL, slots=2)

    def options(job):
        req = EvalRequest(problem=job.problem, candidate=job.candidate, device="cpu", seeds=1, budget=0.05,
                          baselines=["eager"])
        bundle = make_bundle(job.problem, job.candidate)
        return remote_options("eval", req, bundle), bundle

    recorded = []
    killed = threading.Timer(3.0, lambda: os.killpg(channels[0].proc.pid, signal.SIGKILL))
    killed.start()
    try:
        rows = run_batch(jobs, channels, options, lambda job, row: recorded.append(row))
    finally:
        killed.cancel()
        for c in channels:
            c.close()
    assert channels[0].proc.poll() is not None                 # the worker was killed mid-batch
    assert sorted(r["key"] for r in rows) == sorted(j.key for j in jobs) and len(recorded) == len(jobs)
    assert {r["key"] for r in rows if r["correct"]} == {"level1/19/sample_0", "level1/19/sample_2",
                                                        "level1/19/sample_3"}   # the killed worker's job ran again


# ------------------------------------------------------------------ a real local Ray cluster


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """`ray start --head` with two CPU workers, on ports of its own; kernelpilot importable by its workers."""
    if in_ci():
        require_module("ray")
    else:
        pytest.importorskip("ray")
    ray_bin = Path(sys.executable).parent / "ray"
    tmp = Path(tempfile.mkdtemp(prefix="kpray-", dir="/tmp"))     # Ray's socket paths must stay short
    gcs = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RAY_USAGE_STATS_ENABLED": "0"}
    r = subprocess.run([str(ray_bin), "start", "--head", "--num-cpus", "2", "--port", str(gcs),
                        "--min-worker-port", "31000", "--max-worker-port", "31999", "--include-dashboard=false",
                        "--disable-usage-stats", "--temp-dir", str(tmp)], capture_output=True, text=True, env=env,
                       timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    yield {"address": f"127.0.0.1:{gcs}", "env": env}
    subprocess.run([str(ray_bin), "stop", "--force"], capture_output=True, env=env, timeout=120)
    shutil.rmtree(tmp, ignore_errors=True)


def test_eval_batch_on_a_ray_cluster_survives_a_killed_worker(ray_cluster, tmp_path):
    require_module("triton")
    problems, cands = _batch_tree(tmp_path)
    for i in range(4, 8):                                        # more jobs than workers, so a kill lands mid-batch
        shutil.copy(cands / "level1" / "19" / "sample_0.py", cands / "level1" / "19" / f"sample_{i}.py")
    r = _kp("target", "add", "cluster", f"ray:{ray_cluster['address']}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    proc = subprocess.Popen([sys.executable, "-m", "kernelpilot", "eval-batch", str(problems), str(cands), "--target",
                             "cluster", "--device", "cpu", "--seeds", "1", "--budget", "0.05", "--json"],
                            cwd=tmp_path, env=ray_cluster["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    killed = None
    deadline = time.time() + 120
    while killed is None and time.time() < deadline and proc.poll() is None:
        busy = subprocess.run(["pgrep", "-f", "ray::run_job"], capture_output=True, text=True).stdout.split()
        if busy:
            killed = int(busy[0])
            os.kill(killed, 9)                                   # a worker dies mid-job
        time.sleep(0.2)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    d = json.loads(out)
    assert killed is not None, "no Ray worker was seen running a job"
    assert d["jobs"] == 8 and len(d["rows"]) == 8 and d["workers"] == 2
    assert {r["key"] for r in d["rows"] if r["correct"]} == {f"level1/19/sample_{i}" for i in (0, 2, 3, 4, 5, 6, 7)}
    assert all(r["target"]["name"] == "cluster" and r["target"]["node"] for r in d["rows"] if r["correct"])


def test_ctrl_c_stops_the_work_on_an_ssh_target(ssh_project, sshd):
    """Ctrl-C during a job on an SSH target ends the connection, and with it the target's serve process and the
    candidate's worker there (a candidate that hangs)."""
    import signal

    project, env = ssh_project
    proc = subprocess.Popen([sys.executable, "-m", "kernelpilot", "check", str(ROW), "-c",
                             str(ROW / "cheats" / "hang.py"), "--device", "cpu", "--case", SMALL, "--seeds", "1",
                             "--target", "box"], cwd=project, env={**os.environ, "PYTHONPATH": str(ROOT / "src"),
                                                                   **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root = str(sshd["dir"] / "target")

    def serving() -> list[str]:
        return subprocess.run(["pgrep", "-f", f"kernelpilot.targets.serve --root {root}"], capture_output=True,
                              text=True).stdout.split()

    deadline = time.time() + 60
    while not serving() and time.time() < deadline:
        time.sleep(0.2)
    assert serving(), "the job never started there"
    time.sleep(3)                                               # the candidate is hanging in its worker there
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err
    deadline = time.time() + 30
    while serving() and time.time() < deadline:
        time.sleep(0.5)
    assert not serving(), "the target's serve process outlived Ctrl-C"
