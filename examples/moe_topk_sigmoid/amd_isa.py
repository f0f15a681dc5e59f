"""The gfx942 (MI300X) code of this example's AMD kernels, compiled offline and analyzed with `kpilot isa analyze`:
the HIP DPP kernel (the one dispatch.py runs for fp32 logits on GFX9) and the Triton kernel at the tiles it takes
on 64-lane waves (the one it runs for fp16 and bf16), beside the Triton kernel at the 32-lane warps' tile, which
gfx942 would reduce through ds_bpermute. Nothing here runs on an AMD GPU: there is none to run on.

Writes results/gfx942/<name>.txt (the analysis as `kpilot isa analyze` prints it) and results/gfx942/README.md
(a table of the cross-lane and memory instructions of each).

    python examples/moe_topk_sigmoid/amd_isa.py          # needs clang++-19 (HIP) and triton
    python examples/moe_topk_sigmoid/amd_isa.py --every-shape   # needs clang++-19 (HIP) and triton

--every-shape: the Triton kernel that serves each router off NVIDIA compiled for gfx942 at every shape the CUDA
router's tests reach (routing_cuda.path_shapes) and every shape of the four problems' case grids, bf16 and fp32, at
its 64-lane tile, and the HIP kernel at every shape it serves (fp32, 64/128/256 experts, k 4 and 8); for each, the
cross-lane LDS instructions (ds_bpermute, ds_permute, ds_swizzle), VGPR spills and scratch. Writes
results/gfx942/every_shape.json and exits 1 if any build has one of those or does not compile.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE / "kernels"))

import topk_sigmoid_triton as tt  # noqa: E402

ARCH = "gfx942"
CROSS_LANE_LDS = ("ds_bpermute", "ds_permute", "ds_swizzle")   # cross-lane moves through the LDS crossbar
OUT = HERE / "results" / ARCH
SIZES = {"bf16": 2, "fp32": 4}


def builds() -> list[tuple[str, str, list[str]]]:
    """(name, what it is, the `kpilot isa analyze` arguments) of each build."""
    kernels = (HERE / "kernels").relative_to(ROOT)   # paths as the report shows them, from the repository root
    hip = str(kernels / "topk_sigmoid_dpp.hip")
    out = [(f"hip_{e}_k8{'_bias' if b else ''}", f"HIP DPP, fp32, {e} experts, k 8{', bias' if b else ''}",
            [hip, "-D", f"EXPERTS={e}", "-D", "K=8", "-D", f"HAS_BIAS={b}"]) for e in (64, 128, 256) for b in (0, 1)]
    triton = f"{kernels / 'topk_sigmoid_triton.py'}:topk_sigmoid_kernel"
    for e in (64, 128, 256):
        for dtype, size in SIZES.items():
            rows = tt.rows_per_program(e, size, 64)
            out.append((f"triton_{dtype}_{e}_k8", f"Triton, {dtype}, {e} experts, k 8, {rows} rows (64-lane tile)",
                        [triton, "--signature", tt.SIGNATURE.format(dtype), "-D", f"BLOCK_E={e}", "-D", "K=8",
                         "-D", "KP=8", "-D", f"ROWS={rows}"]))
    out.append(("triton_fp32_128_k8_32lane_tile", "Triton, fp32, 128 experts, k 8, 8 rows (32-lane warps' tile)",
                [triton, "--signature", tt.SIGNATURE.format("fp32"), "-D", "BLOCK_E=128", "-D", "K=8", "-D", "KP=8",
                 "-D", "ROWS=8"]))
    return out + router_builds(kernels)


def triton_spec(kernels: Path, file: str, kernel: str, dtype: str, experts: int, k: int, extra: dict,
                 bias: bool, per_group: bool = False) -> tuple[str, str, dict[str, int]]:
    """One Triton kernel at the tile it takes on 64-lane waves: (source, signature, constexprs)."""
    block_e, rows = tt.tile_shape(experts, SIZES[dtype], 64)
    hint = ":16" if experts % 16 == 0 else ""      # Triton's own specialisation of an argument divisible by 16
    signature = (f"logits_ptr:*{dtype}, {'bias_ptr:*fp32, ' if bias else ''}w_ptr:*fp32, ids_ptr:*i32, tokens:i32, "
                 f"experts:i32{hint}{', per_group:i32' if per_group else ''}")
    defines = {"BLOCK_E": block_e, "K": k, "KP": 1 << (k - 1).bit_length(), "ROWS": rows, **extra}
    return f"{kernels / file}:{kernel}", signature, defines


def _triton_build(*spec_args, **spec_kwargs) -> list[str]:
    """The `kpilot isa analyze` arguments of one Triton kernel at the tile it takes on 64-lane waves."""
    source, signature, defines = triton_spec(*spec_args, **spec_kwargs)
    return [source, "--signature", signature, *[a for name, v in defines.items() for a in ("-D", f"{name}={v}")]]


def router_spec(kernels: Path, router: str, dtype: str, experts: int, k: int, extra: dict) -> tuple[str, str, dict]:
    """The Triton kernel that serves `router` off NVIDIA (dispatch.py: the sigmoid kernel for plain and biased,
    routing_triton's for softmax gating and grouped selection) at one shape."""
    if router in ("plain", "biased"):
        return triton_spec(kernels, "topk_sigmoid_triton.py", "topk_sigmoid_kernel", dtype, experts, k,
                            {"HAS_BIAS": int(router == "biased")}, True)
    if router == "softmax":
        return triton_spec(kernels, "routing_triton.py", "topk_softmax_kernel", dtype, experts, k,
                            {"RENORMALIZE": int(extra["renormalize"])}, False)
    n_group = extra["n_group"]
    return triton_spec(kernels, "routing_triton.py", "grouped_topk_kernel", dtype, experts, k,
                        {"N_GROUP": n_group, "NGP": 1 << (n_group - 1).bit_length(), "TOPK_GROUP": extra["topk_group"]},
                        True, per_group=True)


def every_shape() -> list[tuple[str, int, int, dict]]:
    """(router, experts, k, extra): routing_cuda.path_shapes and each shape of the four problems' case grids."""
    import routing_cuda

    from kernelpilot.evaluate.problem import load_problem

    shapes = list(routing_cuda.path_shapes())
    for router in ("plain", "biased", "softmax", "grouped"):
        for case in load_problem(HERE / router).cases:
            p = case.params
            extra = {name: p[name] for name in ("renormalize", "n_group", "topk_group") if name in p}
            shapes.append((router, p["experts"], p["k"], extra))
    unique = {}
    for router, experts, k, extra in shapes:
        unique.setdefault((router, experts, k, tuple(sorted(extra.items()))), (router, experts, k, extra))
    return list(unique.values())


def every_shape_builds() -> list[tuple[dict, str, dict]]:
    """(row, source, analyze options) of each build of the every-shape check: the Triton kernel of each shape of
    every_shape in bf16 and fp32, and the HIP kernel at every shape it serves (fp32 on GFX9, topk_sigmoid_hip)."""
    import topk_sigmoid_hip

    kernels = (HERE / "kernels").relative_to(ROOT)
    out = []
    for router, experts, k, extra in every_shape():
        for dtype in SIZES:
            source, signature, defines = router_spec(kernels, router, dtype, experts, k, extra)
            out.append(({"router": router, "experts": experts, "k": k, **extra, "dtype": dtype,
                         "kernel": source.rsplit(":", 1)[1], "constexprs": defines}, source,
                        {"signature": signature, "defines": defines}))
    for experts in topk_sigmoid_hip.EXPERTS:
        for k in topk_sigmoid_hip.KS:
            for bias in (0, 1):
                defines = {"EXPERTS": experts, "K": k, "HAS_BIAS": bias}
                out.append(({"router": "biased" if bias else "plain", "experts": experts, "k": k, "dtype": "fp32",
                             "kernel": "topk_sigmoid_dpp", "constexprs": defines}, str(kernels / "topk_sigmoid_dpp.hip"),
                            {"defines": defines}))
    return out


def check_every_shape(out: Path | None = OUT / "every_shape.json") -> dict:
    """Every build of every_shape_builds compiled and analyzed, each build's row printed; the summary (its
    "failed": builds with a compile error, cross-lane LDS, a VGPR spill or scratch), written with the rows to `out`
    unless None."""
    from kernelpilot.errors import KernelpilotError
    from kernelpilot.isa import analyze

    rows, bad = [], 0
    for row, source, options in every_shape_builds():
        defines = {name: str(v) for name, v in options.pop("defines").items()}
        try:
            (rep,) = analyze(str(ROOT / source), arch=ARCH, defines=defines, **options)
        except KernelpilotError as e:
            row |= {"ok": False, "error": str(e).splitlines()[0][:300]}
        else:
            ops = rep.opcodes
            cross = sum(n for op, n in ops.items() if op.startswith(CROSS_LANE_LDS))
            res = rep.resources
            row |= {"instructions": sum(ops.values()), "cross_lane_lds": cross, "vgpr": res.vgpr,
                    "vgpr_spill": res.vgpr_spill, "scratch_bytes": res.scratch_bytes,
                    "findings": sorted({f.id for f in rep.findings})}
            row["ok"] = not (cross or res.vgpr_spill or res.scratch_bytes)
        bad += not row["ok"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {"builds": len(rows), "failed": bad, "arch": ARCH,
               "cross_lane_lds": sum(r.get("cross_lane_lds", 0) > 0 for r in rows),
               "vgpr_spill": sum(bool(r.get("vgpr_spill")) for r in rows),
               "scratch": sum(bool(r.get("scratch_bytes")) for r in rows),
               "not_compiled": sum("error" in r for r in rows)}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary))
    return summary


def router_builds(kernels: Path) -> list[tuple[str, str, list[str]]]:
    """The shapes and routers beyond the tuned grid: the sigmoid kernel at the shipped models' expert counts, softmax
    gating and grouped selection (routing_triton.py), each at its 64-lane tile."""
    out = []
    for dtype in SIZES:
        for experts, k in ((8, 2), (160, 8), (384, 8), (512, 16)):
            out.append((f"triton_{dtype}_{experts}_k{k}_bias", f"Triton sigmoid with a bias, {dtype}, {experts} "
                        f"experts, k {k}", _triton_build(kernels, "topk_sigmoid_triton.py", "topk_sigmoid_kernel", dtype,
                                                         experts, k, {"HAS_BIAS": 1}, True)))
        for experts, k, renorm in ((8, 2, 1), (60, 4, 0), (128, 8, 1), (160, 6, 0)):
            out.append((f"softmax_{dtype}_{experts}_k{k}", f"Triton softmax gating, {dtype}, {experts} experts, k {k}",
                        _triton_build(kernels, "routing_triton.py", "topk_softmax_kernel", dtype, experts, k,
                                      {"RENORMALIZE": renorm}, False)))
        for experts, n_group, topk_group, k in ((256, 8, 4, 8), (160, 8, 3, 6), (384, 8, 4, 8)):
            out.append((f"grouped_{dtype}_{experts}_k{k}", f"Triton grouped selection, {dtype}, {experts} experts in "
                        f"{n_group} groups, best {topk_group}, k {k}",
                        _triton_build(kernels, "routing_triton.py", "grouped_topk_kernel", dtype, experts, k,
                                      {"N_GROUP": n_group, "NGP": 1 << (n_group - 1).bit_length(),
                                       "TOPK_GROUP": topk_group}, True, per_group=True)))
    return out


def kpilot(args: list[str]) -> str:
    cmd = [sys.executable, "-m", "kernelpilot", "isa", "analyze", "--arch", ARCH, *args]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    if res.returncode != 0:
        sys.exit(f"kpilot isa analyze {' '.join(args)} failed:\n{res.stderr[-2000:]}")
    return res.stdout


def row(name: str, what: str, report: dict) -> str:
    ops = report["opcodes"]
    count = lambda pred: sum(n for op, n in ops.items() if pred(op))  # noqa: E731
    res, occ = report["resources"], report["occupancy"] or {}
    return " | ".join(map(str, [
        f"`{name}`", what, report["instruction_count"], count(lambda op: op.endswith("_dpp")),
        count(lambda op: "readlane" in op and "readfirstlane" not in op),
        count(lambda op: op.startswith(CROSS_LANE_LDS)),
        count(lambda op: op.startswith("ds_")), res.get("vgpr"), f"{occ.get('percent')}%",
        ", ".join(f["id"] for f in report["findings"]) or "-"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every-shape", action="store_true",
                    help="the routers' Triton kernels and the HIP kernel at every shape they serve instead")
    if ap.parse_args().every_shape:
        sys.exit(1 if check_every_shape()["failed"] else 0)
    OUT.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, what, args in builds():
        text = kpilot(args)
        (OUT / f"{name}.txt").write_text(f"$ kpilot isa analyze --arch {ARCH} {shlex.join(args)}\n\n{text}")
        (report,) = json.loads(kpilot([*args, "--json"]))["kernels"]
        lines.append("| " + row(name, what, report) + " |")
        print(lines[-1])
    md = ["# The AMD kernels on gfx942 (MI300X): compiled and analyzed, not run", "",
          "Compiled offline by `amd_isa.py` (clang++-19 for HIP, Triton for the Triton kernel) and analyzed with "
          "`kpilot isa analyze --arch gfx942`; each file here holds one analysis. **None of this has run on AMD "
          "hardware**: there is no AMD GPU to run it on, so these are static counts, not times.", "",
          "| build | what | instructions | DPP | v_readlane | ds_bpermute / swizzle | all ds_ (LDS) | VGPRs | occupancy | findings |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |", *lines, "",
          "DPP: instructions with a DPP modifier (quad_perm, row_shr, row_ror, row_half_mirror, row_bcast). The HIP "
          "kernel's cross-lane work is DPP and one v_readlane per round (one more for the bias's sum), with no LDS. "
          "The Triton kernel at its 64-lane tiles reduces by DPP alone: a token on 16 lanes or fewer (64 experts; "
          "128 with 16-bit logits) within rows of 16 lanes, with no readlane; one on a whole wave with row_shr and "
          "row_bcast and a readlane per reduction (three per round). Its few LDS instructions move the outputs "
          "once before the stores. At the 32-lane warps' tile, a token on 32 lanes, the reduction over a wave's "
          "two halves is a ds_bpermute (three per round), which kpilot flags (amd.lds-crosslane).", "",
          "The rows after it: the shapes beyond the tuned grid (8 to 512 experts, k up to 16) and the other two "
          "routers (softmax gating and grouped selection, routing_triton.py), each at its 64-lane tile: none "
          "reduces through ds_bpermute. Where a token takes a whole wave, a reduction ends in v_readlane (kpilot's "
          "amd.readlane-chain), and the ds_ instructions move values between layouts, not across lanes in the "
          "rounds.", "",
          "`every_shape.json` (`amd_isa.py --every-shape`): the Triton kernel that serves each router off NVIDIA (the "
          "sigmoid kernel for plain and biased, routing_triton.py's for softmax gating and grouped selection) at every "
          "shape the router tests reach and every shape of the four case grids, bf16 and fp32, each at its 64-lane "
          "tile (`tile_shape`), and the HIP kernel at every shape it serves; its summary counts the builds with a "
          "ds_bpermute, ds_permute or ds_swizzle, a VGPR spill or scratch."]
    (OUT / "README.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
