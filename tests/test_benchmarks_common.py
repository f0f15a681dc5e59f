"""benchmarks/_common.py, the helpers every benchmark script shares (kernelpilot's own and the examples'): the
commit a results file names."""

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import _common  # noqa: E402


def test_the_measured_commit_names_changes_to_kernels_but_not_to_results(tmp_path, monkeypatch):
    """A results file's "git": the commit, "+changes" where the package, the benchmarks or an example's kernels
    differ from it (a tree copied beside an older history), not where only results files do."""
    monkeypatch.delenv("KPILOT_GIT_REV", raising=False)
    kernels, results = tmp_path / "examples" / "moe" / "kernels", tmp_path / "examples" / "moe" / "results"
    for folder in (kernels, results, tmp_path / "src", tmp_path / "benchmarks" / "results"):
        folder.mkdir(parents=True)
        (folder / "f.txt").write_text("one\n")

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "first")
    rev = _common._git_rev(tmp_path)
    assert rev and not rev.endswith("+changes")
    for f in (results / "f.txt", tmp_path / "benchmarks" / "results" / "f.txt"):
        f.write_text("two\n")
    assert _common._git_rev(tmp_path) == rev
    (kernels / "f.txt").write_text("two\n")
    assert _common._git_rev(tmp_path) == rev + "+changes"
    monkeypatch.setenv("KPILOT_GIT_REV", "abc1234")
    assert _common._git_rev(tmp_path) == "abc1234"
