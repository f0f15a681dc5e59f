"""benchmarks/moe_variants.py without a GPU: its timing sets, the trees it lays variants over, its comparison."""

import argparse
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import moe_variants  # noqa: E402


def test_timing_sets_parse_and_bad_ones_say_why():
    assert moe_variants.parse_set("warp:1,16,1024") == ("warp", [1, 16, 1024])
    for bad in ("keys", ":65536", "keys:many"):
        with pytest.raises(argparse.ArgumentTypeError):
            moe_variants.parse_set(bad)


def test_a_variant_replaces_kernel_files_and_nothing_else(tmp_path):
    overlay = tmp_path / "v"
    overlay.mkdir()
    (overlay / "topk_sigmoid_keys.cu").write_text("// the variant\n")
    tree = moe_variants.make_tree("v", overlay, tmp_path / "trees")
    kernels = tree / moe_variants.KERNELS
    assert (kernels / "topk_sigmoid_keys.cu").read_text() == "// the variant\n"
    assert (kernels / "topk_sigmoid_warp.cu").read_text() == (ROOT / moe_variants.KERNELS / "topk_sigmoid_warp.cu").read_text()
    base = moe_variants.make_tree("base", None, tmp_path / "trees")
    assert (base / moe_variants.KERNELS / "topk_sigmoid_keys.cu").read_bytes() == \
        (ROOT / moe_variants.KERNELS / "topk_sigmoid_keys.cu").read_bytes()

    (overlay / "not_a_kernel.cu").write_text("")
    with pytest.raises(SystemExit, match="replaces no file"):
        moe_variants.make_tree("v2", overlay, tmp_path / "trees")


def test_comparison_gives_each_variant_its_ratio_to_the_base_and_marks_failed_checks():
    def row(us, ok=True):
        return {"variant": "plain", "dtype": "bfloat16", "experts": 256, "tokens": 65536, "k": 8, "algo": "keys",
                "keys": {"us": us, "ok": ok, "message": "ok"}}

    (line,) = moe_variants.compare({"base": [row(20.0)], "fast": [row(15.0)], "wrong": [row(10.0, ok=False)]})
    assert "base   20.00" in line and "fast   15.00 (0.750x)" in line and "wrong   10.00! (0.500x)" in line
