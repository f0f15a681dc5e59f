"""kernelpilot's test helpers for the case study's tests: tests/conftest.py loaded by path under a module name of its
own (`shared`), and the names these tests use from it (ROOT, EXAMPLES, in_ci, require_tool, require_module), plus
MOE, the case study's folder, and the router shapes and check that the CUDA router's tests share (on the GPU and in
the CPU emulation).

The tests import them from here, not from conftest: tests/conftest.py and this folder's conftest.py are both outside
a package, so pytest imports each as the module `conftest`, and where both folders run in one session (pytest tests
examples/moe_topk_sigmoid/tests) that name means whichever of the two pytest imported last."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("kernelpilot_tests_conftest",
                                               Path(__file__).resolve().parents[3] / "tests" / "conftest.py")
shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shared)

ROOT = shared.ROOT
EXAMPLES = shared.EXAMPLES
MOE = EXAMPLES / "moe_topk_sigmoid"
in_ci = shared.in_ci
require_tool = shared.require_tool
require_module = shared.require_module


def router_shapes() -> list[tuple[str, int, int, dict]]:
    """(router, experts, k, extra) over the shapes the CUDA router serves: 8 to 512 experts, k 1 to 16; grouped
    selections whose groups are whole lanes and ones whose groups are not (96 in 16 groups, 120 in 8)."""
    out = []
    for experts, ks in ((8, (1, 2, 8)), (12, (3,)), (16, (16,)), (24, (5,)), (32, (4,)), (60, (4,)), (64, (1, 16)),
                        (100, (7,)), (160, (6, 8)), (256, (2, 16)), (384, (8,)), (512, (16,))):
        for k in ks:
            out += [("plain", experts, k, {}), ("biased", experts, k, {}), ("softmax", experts, k, {"renormalize": True}),
                    ("softmax", experts, k, {"renormalize": False})]
    out += [("grouped", e, k, {"n_group": g, "topk_group": t}) for e, g, t, k in
            ((256, 8, 4, 8), (160, 8, 3, 6), (384, 8, 4, 8), (64, 8, 4, 6), (16, 4, 2, 3), (512, 16, 8, 16), (8, 8, 8, 2),
             (96, 16, 6, 16), (120, 8, 4, 8))]
    return out


def check_routing(route, router: str, x, bias, k: int, extra: dict) -> tuple[bool, str]:
    """Route ``x`` by ``route`` (routing_cuda.route's signature) and check the output with its problem's check
    against the reference (the plain router's ids exactly, ties by the lower index)."""
    import reference as ref

    if router in ("plain", "biased"):
        inputs = (x, bias if router == "biased" else None, k)
        return ref.check(inputs, route(router, *inputs), ref.topk_sigmoid(*inputs))
    if router == "softmax":
        inputs = (x, k, extra["renormalize"])
        return ref.check_softmax(inputs, route("softmax", x, None, k, extra["renormalize"]), ref.topk_softmax(*inputs))
    inputs = (x, bias, k, extra["n_group"], extra["topk_group"])
    out = route("grouped", x, bias, k, n_group=extra["n_group"], topk_group=extra["topk_group"])
    return ref.check_grouped(inputs, out, ref.grouped_topk(*inputs))
