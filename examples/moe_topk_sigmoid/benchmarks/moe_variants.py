"""Variants of the MoE kernels side by side, before and after in one run: each variant is a folder of files that
replace files of examples/moe_topk_sigmoid/kernels/ (say a changed topk_sigmoid_keys.cu). The tree as it is
runs as "base". Each variant gets a copy of the tree; all are built at once (one PyTorch extension each),
then each runs the GPU tests of edge cases, and moe_large.py times them all in one process, case by
case, each case on every variant in turn over --rounds rounds (outputs checked), so that the GPU's drift over
the run falls on all alike. The times are printed against the base's. Writes OUT/variants.json.

    python examples/moe_topk_sigmoid/benchmarks/moe_variants.py OUT VARIANT_DIR [VARIANT_DIR ...] [--dtype float32 ...] [--tests EXPR]
        [--problem-variant biased] [--rounds 2]

Before spending a GPU call, moe_build_check.py VARIANT_DIR ... compiles each variant's extension for
sm_90 on this machine, no GPU needed: a variant that fails to build on the GPU machine stops the whole run.

Timing sets (--set, repeatable; default: the one-pass grid at 65,536 tokens and the persistent grid at 8,192):
ALGO:TOKENS[,TOKENS...], e.g. keys:65536 or warp:1,16,128,1024.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MOE = Path("examples") / "moe_topk_sigmoid"   # the case study, relative to the tree
KERNELS = MOE / "kernels"
COPIED = ("src", "examples", "benchmarks", "tests", "pyproject.toml")
EDGE_TESTS = "not_positive or outside_the_grid"   # tokens whose top k is not positive; 1 to 20,001 tokens
DEFAULT_SETS = ("keys:65536", "keys_persistent:8192")


def parse_set(text: str) -> tuple[str, list[int]]:
    """'keys:65536,8192' -> ('keys', [65536, 8192])."""
    algo, _, tokens = text.partition(":")
    if not algo or not tokens:
        raise argparse.ArgumentTypeError(f"a timing set is ALGO:TOKENS[,TOKENS...], not {text!r}")
    try:
        return algo, [int(t) for t in tokens.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"tokens must be integers: {text!r}") from None


def make_tree(name: str, overlay: Path | None, into: Path) -> Path:
    """A copy of the tree for one variant, its files laid over the kernels folder."""
    tree = into / name
    for part in COPIED:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, tree / part, ignore=shutil.ignore_patterns("__pycache__", "results"))
        elif src.exists():
            shutil.copy2(src, tree / part)
    (tree / MOE / "results").mkdir(parents=True, exist_ok=True)   # where moe_large.py writes
    if overlay is not None:
        lay_over(overlay, tree / KERNELS)
    return tree


def lay_over(overlay: Path, kernels: Path) -> None:
    """The variant folder's files copied over the kernels folder's, each replacing one of them."""
    for f in (f for f in overlay.iterdir() if f.is_file()):
        if not (kernels / f.name).exists():
            sys.exit(f"{overlay}: {f.name} replaces no file of {KERNELS}")
        shutil.copy2(f, kernels / f.name)


def kernel_trees(variants: list[Path], into: Path) -> dict[str, Path]:
    """The kernels folders to check (name -> folder): the tree's where no variant is given, else each variant
    folder laid over a copy of the tree's kernels made under `into` (moe_build_check.py, moe_emulation_check.py)."""
    if not variants:
        return {"tree": ROOT / KERNELS}
    trees = {}
    for i, folder in enumerate(variants):
        if not folder.is_dir():
            sys.exit(f"{folder}: not a folder")
        if str(folder) in trees:
            sys.exit(f"{folder}: given twice")
        kernels = into / f"{i}_{folder.resolve().name}"   # numbered: two variants may share a folder name
        shutil.copytree(ROOT / KERNELS, kernels, ignore=shutil.ignore_patterns("__pycache__"))
        lay_over(folder, kernels)
        trees[str(folder)] = kernels
    return trees


def large_command(algo: str, tokens: list[int], dtypes: list[str], variants: list[str], kernels: dict[str, Path],
                  rounds: int) -> list[str]:
    """The moe_large.py run that times one timing set on every tree in turn."""
    return [sys.executable, str(MOE / "benchmarks" / "moe_large.py"), *[a for d in dtypes for a in ("--dtype", d)],
            *[a for v in variants for a in ("--variant", v)], "--algo", algo, "--no-stream",
            *[a for n, t in kernels.items() for a in ("--kernels", f"{n}={t / KERNELS}")],
            "--rounds", str(rounds), *[a for t in tokens for a in ("--tokens", str(t))]]


def run(cmd: list[str], tree: Path, log: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), PYTHONUNBUFFERED="1")
    with open(log, "w") as out:
        return subprocess.run(cmd, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT).returncode


def build(tree: Path, log: Path) -> int:
    code = ("import sys; sys.path.insert(0, %r); import topk_sigmoid_cuda as t; t._extension()"
            % str(tree / KERNELS))
    return run([sys.executable, "-c", code], tree, log)


def per_variant(rows: list[dict], algo: str, name: str) -> list[dict]:
    """An interleaved moe_large.py run's rows (row[algo][name]: that variant's time) as one variant's rows
    (row[algo]: its time, row["algo"]: the algorithm)."""
    return [{k: v for k, v in r.items() if k != algo} | {"algo": algo, algo: r[algo][name]} for r in rows]


def compare(results: dict[str, list[dict]]) -> list[str]:
    """One line per case and timing set: each variant's time (us; ! where its outputs failed the check) and its
    ratio to the base's."""
    names = list(results)
    base = results[names[0]]
    lines = []
    for i, row in enumerate(base):
        algo = row["algo"]
        cells = []
        for name in names:
            got = results[name][i][algo]
            ratio = got["us"] / row[algo]["us"]
            cells.append(f"{name} {got['us']:7.2f}{'' if got['ok'] else '!'}"
                         + ("" if name == names[0] else f" ({ratio:.3f}x)"))
        lines.append(f"{row['variant']:6} {row['dtype']:8} {row['experts']:3} {row['tokens']:5} k{row['k']}  {algo:15}"
                     + "  ".join(cells))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("variants", type=Path, nargs="+", help="folders of files replacing files of " + str(KERNELS))
    ap.add_argument("--dtype", action="append", help="default bfloat16")
    ap.add_argument("--problem-variant", action="append", choices=["plain", "biased"],
                    help="only this variant of the problem (repeatable; default both)")
    ap.add_argument("--set", dest="sets", action="append", type=parse_set, help="ALGO:TOKENS[,TOKENS...]")
    ap.add_argument("--tests", default=EDGE_TESTS, help="pytest -k expression of the GPU tests to run ('' for none)")
    ap.add_argument("--rounds", type=int, default=2, help="timing rounds per case, the variants' order reversed "
                    "every other round (default 2)")
    args = ap.parse_args()
    for v in args.variants:
        if not v.is_dir():
            sys.exit(f"{v}: not a folder")
    names = ["base"] + [v.name for v in args.variants]
    if len(set(names)) != len(names):
        sys.exit("variant folders need distinct names (and none called base)")
    args.out.mkdir(parents=True, exist_ok=True)
    sets = args.sets or [parse_set(s) for s in DEFAULT_SETS]
    with tempfile.TemporaryDirectory(prefix="moe_variants_") as tmp:
        trees = {n: make_tree(n, v, Path(tmp)) for n, v in zip(names, [None, *args.variants])}
        os.environ.setdefault("MAX_JOBS", str(max(1, (os.cpu_count() or 4) // len(trees))))
        with ThreadPoolExecutor(len(trees)) as pool:   # the builds at once, each with a share of the cores
            codes = dict(zip(trees, pool.map(lambda n: build(trees[n], args.out / f"build_{n}.log"), trees)))
        failed = [n for n, c in codes.items() if c]
        if failed:
            sys.exit(f"build failed: {', '.join(failed)} (see {args.out}/build_<name>.log)")
        tests = {}
        for name, tree in trees.items():
            if args.tests:
                log = args.out / f"pytest_{name}.log"
                code = run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                            str(MOE / "tests" / "test_moe_problem.py"), "-k", args.tests], tree, log)
                tests[name] = {"exit": code, "summary": log.read_text().strip().splitlines()[-1:]}
                print(f"{name}: GPU tests exit {code} {tests[name]['summary']}", flush=True)
        results = {name: [] for name in trees}
        base = trees["base"]
        for algo, tokens in sets:
            cmd = large_command(algo, tokens, args.dtype or ["bfloat16"], args.problem_variant or [], trees,
                                args.rounds)
            if run(cmd, base, args.out / f"large_{algo}.log"):
                sys.exit(f"moe_large.py failed (see {args.out}/large_{algo}.log)")
            got = json.loads((base / MOE / "results" / "moe_large.json").read_text())["rows"]
            for name in trees:
                results[name] += per_variant(got, algo, name)
    lines = compare(results)
    print("\n".join(lines))
    (args.out / "variants.json").write_text(json.dumps({"variants": names, "tests": tests, "results": results},
                                                       indent=1))
    bad = [n for n, t in tests.items() if t["exit"]] + [n for n, rows in results.items()
                                                        if any(not r[r["algo"]]["ok"] for r in rows)]
    if bad:
        sys.exit(f"failed tests or checks: {', '.join(sorted(set(bad)))}")


if __name__ == "__main__":
    main()
