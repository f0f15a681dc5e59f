"""Charts drawn with matplotlib from real results: the roofline of bench output captured on the H200."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, require_module

from kernelpilot.errors import KernelpilotError

FIXTURE = ROOT / "tests" / "fixtures" / "roofline" / "row_softmax_h200.json"


def test_a_roofline_of_bench_output_from_the_h200(tmp_path):
    require_module("matplotlib")
    from kernelpilot.runs.plot import roofline_png

    d = json.loads(FIXTURE.read_text())
    png = roofline_png(d["bench"], tmp_path / "roofline.png", title=f"row_softmax on {d['gpu']}")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    with pytest.raises(KernelpilotError, match="declares its cost"):
        roofline_png([{"case": "n=1", "median_us": 3.0, "roofline": None}], tmp_path / "none.png")
