"""kernelpilot's test helpers for the case study's tests: tests/conftest.py loaded by path under a module name of its
own (`shared`), and the names these tests use from it (ROOT, EXAMPLES, in_ci, require_tool, require_module), plus
MOE, the case study's folder.

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
