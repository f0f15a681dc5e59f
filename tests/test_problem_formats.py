"""KernelBench and GPU MODE problems: detection, loading, malformed inputs (one typed error with one line each),
and each runtime's round trip on the CPU with real torch (Triton candidates under Triton's interpreter)."""

from __future__ import annotations

import json
import textwrap
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import EXAMPLES, require_module

from kernelpilot.errors import InputFormatError, KernelpilotError, UsageError
from kernelpilot.evaluate.formats import detect_and_load, gpumode, kernelbench, native, runtime_for
from kernelpilot.evaluate.guards import fingerprint
from kernelpilot.evaluate.problem import Case, Problem, load_problem

PROBLEMS = EXAMPLES / "problems"
KB_DIR = PROBLEMS / "kernelbench_relu"
KB_FILE = KB_DIR / "19_ReLU.py"
KB_CANDIDATES = KB_DIR / "candidates"
GM_DIR = PROBLEMS / "gpumode_vectoradd"
NATIVE = sorted(p.parent for p in PROBLEMS.glob("*/problem.toml"))


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _one_line(exc: KernelpilotError, *words: str) -> str:
    text = str(exc)
    assert "\n" not in text, text
    for w in words:
        assert w in text, (w, text)
    return text


# ---------------------------------------------------------------------------------------------- detect and load

def test_kernelbench_example_loads():
    assert kernelbench.detect(KB_FILE)
    assert not gpumode.detect(KB_FILE) and not native.detect(KB_FILE)
    p = load_problem(KB_FILE)
    assert (p.format, p.name, p.entry, p.root) == ("kernelbench", "19_ReLU", "ModelNew", KB_FILE.resolve())
    assert p.cases == [Case(name="19_ReLU", params={})]
    assert p.benchmark_cases == []
    assert p.options["init_seed"] == 42
    # KernelBench's atol = rtol = 1e-2, whatever the output dtype
    for dtype in ("float32", "torch.float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "int8"):
        t = p.tolerance_for(dtype)
        assert (t.atol, t.rtol) == (1e-2, 1e-2), dtype
    again = Problem.from_json(json.loads(json.dumps(p.to_json())))
    assert again.to_json() == p.to_json()


def test_gpumode_example_loads():
    assert gpumode.detect(GM_DIR) and gpumode.detect(GM_DIR / "task.yml")
    assert not kernelbench.detect(GM_DIR) and not native.detect(GM_DIR)
    p = load_problem(GM_DIR)
    assert (p.format, p.name, p.entry) == ("gpumode", "gpumode_vectoradd", "custom_kernel")
    assert [c.name for c in p.cases] == ["size=127", "size=128", "size=129", "size=256"]
    assert [c.params for c in p.cases] == [{"size": 127}, {"size": 128}, {"size": 129}, {"size": 256}]
    assert [c.name for c in p.benchmark_cases] == ["size=1024", "size=2048", "size=4096"]
    assert p.tolerances == {}
    seeds = p.options["public_seeds"]
    assert seeds["tests"]["size=127"] == 4242 and seeds["benchmarks"]["size=4096"] == 2146
    assert p.options["ranking_by"] == "geom"
    assert p.options["submission"] == "submission.py"
    assert p.case("size=2048").params == {"size": 2048}
    assert load_problem(GM_DIR / "task.yml").to_json() == p.to_json()
    again = Problem.from_json(json.loads(json.dumps(p.to_json())))
    assert again.to_json() == p.to_json()


@pytest.mark.parametrize("folder", NATIVE, ids=[p.name for p in NATIVE])
def test_native_examples_are_not_taken_by_the_other_formats(folder):
    assert native.detect(folder)
    assert not gpumode.detect(folder) and not kernelbench.detect(folder)
    assert load_problem(folder).format == "native"


def test_detect_says_no_to_other_things(tmp_path):
    assert not kernelbench.detect(KB_DIR)                      # a folder
    plain = _write(tmp_path / "helper.py", "def f():\n    return 1\n")
    assert not kernelbench.detect(plain)                       # a .py without any of the three names
    with pytest.raises(UsageError) as e:
        detect_and_load(plain)
    _one_line(e.value, "KernelBench")
    only_ref = _write(tmp_path / "half" / "reference.py", "def ref_kernel(d):\n    return d\n")
    assert not gpumode.detect(only_ref.parent)                 # no task.yml
    assert not gpumode.detect(only_ref)


# ------------------------------------------------------------------------------------------ malformed problems

_REF = """
    import torch

    def generate_input(size, seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(size, generator=g),)

    def ref_kernel(data):
        return data[0] * 2

    def check_implementation(data, output):
        return (True, "") if torch.equal(output, ref_kernel(data)) else (False, "different")
"""


def _gpumode(root: Path, task: str, reference: str = _REF) -> Path:
    _write(root / "reference.py", reference)
    _write(root / "task.yml", task)
    return root


@pytest.mark.parametrize("task, words", [
    ("benchmarks:\n  - {size: 8, seed: 1}\n", ["no tests", "task.yml"]),
    ("tests:\n  - {size: 8, seed: 1\n", ["not valid YAML", "line"]),
    ("tests: [\n", ["not valid YAML"]),
    ("- {size: 8}\n", ["mapping"]),
    ("tests: {size: 8}\n", ["tests must be a list"]),
    ("tests:\n  - 8\n", ["tests[0] must be a mapping"]),
    ("tests: []\n", ["tests is empty"]),
    ("tests:\n  - {size: 8, seed: abc}\n", ["tests[0].seed", "integer"]),
    ("tests:\n  - {size: [1, 2], seed: 3}\n", ["tests[0].size"]),
    ("lang: cu\ntests:\n  - {size: 8, seed: 1}\n", ["lang", "'cu'"]),
    ("files:\n  - {name: utils.py, source: ../utils.py}\ntests:\n  - {size: 8, seed: 1}\n",
     ["utils.py", "../utils.py", "missing"]),
    ("files: utils.py\ntests:\n  - {size: 8, seed: 1}\n", ["files must be a list"]),
], ids=["no-tests", "unclosed-flow", "unclosed-list", "top-level-list", "tests-mapping", "test-not-mapping",
        "tests-empty", "seed-not-int", "value-not-scalar", "lang-cu", "missing-shared-file", "files-not-list"])
def test_malformed_task_yml(tmp_path, task, words):
    root = _gpumode(tmp_path / "prob", task)
    assert gpumode.detect(root)
    with pytest.raises(InputFormatError) as e:
        load_problem(root)
    _one_line(e.value, *words)


def test_reference_without_check_implementation(tmp_path):
    ref = _REF.replace("def check_implementation", "def something_else")
    root = _gpumode(tmp_path / "prob", "tests:\n  - {size: 8, seed: 1}\n", ref)
    with pytest.raises(InputFormatError) as e:
        load_problem(root)
    _one_line(e.value, "check_implementation", "reference.py")


def test_gpumode_seedless_and_duplicate_cases(tmp_path):
    # mla_py's task.yml writes {"seed":} (a null seed); two cases may differ only in their seed
    root = _gpumode(tmp_path / "prob", 'tests:\n  - {"size": 8, "seed":}\n  - {"size": 8, "seed": 5}\n'
                                      '  - {"size": 9}\n')
    p = load_problem(root)
    assert [c.name for c in p.cases] == ["size=8", "size=8#2", "size=9"]
    assert p.options["public_seeds"]["tests"] == {"size=8": None, "size=8#2": 5}


_KB_OK = """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = nn.Linear(n, n)

        def forward(self, x):
            return self.lin(x)

    n = 8

    def get_inputs():
        return [torch.randn(4, n)]

    def get_init_inputs():
        return [n]
"""


def test_kernelbench_file_without_get_inputs(tmp_path):
    f = _write(tmp_path / "1_Broken.py", _KB_OK.replace("def get_inputs", "def make_inputs"))
    assert kernelbench.detect(f)
    with pytest.raises(InputFormatError) as e:
        load_problem(f)
    _one_line(e.value, "get_inputs", "1_Broken.py")


def test_kernelbench_file_with_a_syntax_error(tmp_path):
    f = _write(tmp_path / "2_Syntax.py", "class Model(nn.Module)\n    pass\n")
    with pytest.raises(InputFormatError) as e:
        load_problem(f)
    _one_line(e.value, "syntax error", "line 1")


def test_kernelbench_candidate_passed_as_the_problem():
    path = KB_CANDIDATES / "relu_library.py"
    assert kernelbench.detect(path)
    with pytest.raises(InputFormatError) as e:
        load_problem(path)
    _one_line(e.value, "ModelNew", "candidate", "relu_library.py")


# ------------------------------------------------------------------------------------------ malformed candidates

@pytest.fixture(scope="module")
def kb_rt():
    require_module("torch")
    return runtime_for(load_problem(KB_FILE))


@pytest.fixture(scope="module")
def gm_rt():
    require_module("torch")
    return runtime_for(load_problem(GM_DIR))


@pytest.mark.parametrize("source, words", [
    ("import torch.nn as nn\nclass Model(nn.Module):\n    pass\n", ["no 'ModelNew'", "Model"]),
    ("raise RuntimeError('no compiler here')\n", ["failed to import", "RuntimeError", "no compiler here"]),
    ("class ModelNew(:\n", ["syntax error", "line 1"]),
    ("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(self, a, b):\n        super().__init__()\n",
     ["ModelNew(*get_init_inputs()) failed", "TypeError"]),
], ids=["no-modelnew", "import-fails", "syntax", "constructor-fails"])
def test_bad_kernelbench_candidates(kb_rt, tmp_path, source, words):
    path = _write(tmp_path / "cand.py", source)
    with pytest.raises(InputFormatError) as e:
        kb_rt.load_candidate(path, "cpu", 0)
    _one_line(e.value, str(path), *words)


@pytest.mark.parametrize("source, words", [
    ("def kernel(data):\n    return data[0]\n", ["no 'custom_kernel'", "kernel"]),
    ("from task import does_not_exist\n", ["failed to import", "ImportError"]),
    ("custom_kernel = 3\n", ["not callable"]),
], ids=["no-custom-kernel", "import-fails", "not-callable"])
def test_bad_gpumode_candidates(gm_rt, tmp_path, source, words):
    path = _write(tmp_path / "submission.py", source)
    with pytest.raises(InputFormatError) as e:
        gm_rt.load_candidate(path, "cpu", 0)
    _one_line(e.value, *words)


# ---------------------------------------------------------------------------------------- KernelBench runtime

def test_kernelbench_round_trip(kb_rt):
    torch = require_module("torch")
    case = kb_rt.problem.cases[0]
    a, b, c = (kb_rt.make_inputs(case, s, "cpu") for s in (7, 7, 8))
    assert len(a) == 1 and a[0].shape == (16, 4096) and a[0].device.type == "cpu"
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    assert bool((a[0] < -1).any())            # randn: negative inputs exist, so a wrong slope shows
    expected = kb_rt.reference(a, case, 7)
    assert torch.equal(expected, torch.relu(a[0]))

    library = kb_rt.load_candidate(KB_CANDIDATES / "relu_library.py", "cpu", 0)
    assert torch.equal(library(*a), expected)
    wrong = kb_rt.load_candidate(KB_CANDIDATES / "relu_wrong.py", "cpu", 0)
    tol = kb_rt.problem.tolerance_for(str(expected.dtype))
    assert not torch.allclose(wrong(*a), expected, atol=tol.atol, rtol=tol.rtol)
    assert kb_rt.check(a, expected, expected, case) is None
    assert torch.equal(kb_rt.baseline("eager")(*a), expected)
    assert callable(kb_rt.baseline("compile"))
    with pytest.raises(UsageError):
        kb_rt.baseline("cudnn")


def test_kernelbench_triton_candidate_under_the_interpreter(kb_rt, monkeypatch):
    torch = require_module("torch")
    require_module("triton")
    # Triton reads TRITON_INTERPRET when @triton.jit decorates (knobs.runtime.interpret), so setting it before
    # the candidate is imported is enough, even with triton already imported in this process.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = kb_rt.problem.cases[0]
    inputs = kb_rt.make_inputs(case, 3, "cpu")
    fn = kb_rt.load_candidate(KB_CANDIDATES / "relu_triton.py", "cpu", 0)
    assert torch.equal(fn(*inputs), kb_rt.reference(inputs, case, 3))


def test_kernelbench_weights_match_under_the_init_seed(tmp_path):
    torch = require_module("torch")
    f = _write(tmp_path / "3_Linear.py", _KB_OK)
    cand = _write(tmp_path / "linear_new.py", """
        import torch
        import torch.nn as nn

        class ModelNew(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.lin = nn.Linear(n, n)

            def forward(self, x):
                return torch.addmm(self.lin.bias, x, self.lin.weight.t())
    """)
    rt = runtime_for(load_problem(f))
    case = rt.problem.cases[0]
    torch.manual_seed(1234)               # whatever the RNG state before, the weights come from the init seed
    fn = rt.load_candidate(cand, "cpu", 0)
    inputs = rt.make_inputs(case, 11, "cpu")
    expected = rt.reference(inputs, case, 11)
    assert torch.allclose(fn(*inputs), expected, atol=1e-6, rtol=1e-6)
    assert not expected.requires_grad
    # KernelBench never calls eval(): both models stay in training mode unless the problem says otherwise
    assert fn.model.training
    p = load_problem(f)
    p.options["eval_mode"] = True
    assert not runtime_for(p).load_candidate(cand, "cpu", 0).model.training


def test_kernelbench_get_inputs_failure_is_a_problem_error(tmp_path):
    require_module("torch")
    f = _write(tmp_path / "4_Bad.py", _KB_OK.replace("return [torch.randn(4, n)]", "return [undefined_name]"))
    rt = runtime_for(load_problem(f))
    with pytest.raises(InputFormatError) as e:
        rt.make_inputs(rt.problem.cases[0], 1, "cpu")
    _one_line(e.value, "get_inputs() failed", "NameError")


# ------------------------------------------------------------------------------------------- GPU MODE runtime

def test_gpumode_round_trip(gm_rt):
    torch = require_module("torch")
    case = gm_rt.problem.case("size=127")
    a, b, c = (gm_rt.make_inputs(case, s, "cpu") for s in (21, 21, 22))
    assert len(a) == 1 and len(a[0]) == 3
    # The same bytes from the same seed, the output buffer made with torch.empty included (filled while
    # generate_input runs), so two processes agree on the inputs.
    assert fingerprint(a) == fingerprint(b) and fingerprint(a) != fingerprint(c)
    A, B, C = a[0]
    expected = gm_rt.reference(a, case, 21)
    assert torch.equal(expected, A + B)
    assert bool(C.isnan().all())              # ref_kernel wrote into a copy of the preallocated output
    assert expected.data_ptr() != C.data_ptr()
    assert gm_rt.check(a, expected, expected, case) == (True, "")
    ok, message = gm_rt.check(a, expected + 1, expected, case)
    assert not ok and "mismatch" in message
    assert gm_rt.baseline("eager") is gm_rt._ref_kernel
    with pytest.raises(UsageError):
        gm_rt.baseline("cudnn")


def test_gpumode_candidates(gm_rt, monkeypatch):
    require_module("torch")
    require_module("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    triton_fn = gm_rt.load_candidate(GM_DIR / "submission_triton.py", "cpu", 0)
    wrong = gm_rt.load_candidate(GM_DIR / "submission_wrong.py", "cpu", 0)
    for case in gm_rt.problem.cases:
        inputs = gm_rt.make_inputs(case, 99, "cpu")
        assert gm_rt.check(inputs, triton_fn(*inputs), None, case) == (True, ""), case.name
        inputs = gm_rt.make_inputs(case, 99, "cpu")
        ok, message = gm_rt.check(inputs, wrong(*inputs), None, case)
        # the wrong submission drops the tail past the last whole block of 1024: right only when size^2 is a
        # multiple of 1024
        assert ok == (case.params["size"] ** 2 % 1024 == 0), case.name
        if not ok:
            assert "mismatch" in message and "\n" not in message


def test_gpumode_check_uses_pristine_data(gm_rt, tmp_path):
    """A candidate that zeroes its inputs and returns zeros would pass a check run on the data it was given."""
    require_module("torch")
    path = _write(tmp_path / "zeroing.py", """
        def custom_kernel(data):
            A, B, C = data
            A.zero_()
            B.zero_()
            return C.zero_()
    """)
    fn = gm_rt.load_candidate(path, "cpu", 0)
    case = gm_rt.problem.case("size=128")
    inputs = gm_rt.make_inputs(case, 5, "cpu")
    ok, message = gm_rt.check(inputs, fn(*inputs), None, case)
    assert not ok and "mismatch" in message
    # inputs rebuilt as a plain tuple (as a worker moving them between devices does): check copies them
    fresh = gm_rt.make_inputs(case, 5, "cpu")
    plain = tuple(fresh)
    assert gm_rt.check(plain, fresh[0][0] + fresh[0][1], None, case) == (True, "")
    assert bool(plain[0][2].isnan().all())   # check_implementation's ref_kernel wrote into a copy


_SHARED_UTILS = """
    import torch

    def late_helper(output, expected):
        return torch.equal(output, expected)
"""

_STAGED_REF = """
    import torch
    from task import input_t

    def generate_input(n: int, seed: int) -> input_t:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, generator=g)
        return {"x": x, "out": torch.empty_like(x)}

    def ref_kernel(data):
        torch.mul(data["x"], 3, out=data["out"])
        return data["out"]

    def check_implementation(data, output):
        from utils import late_helper          # imported at call time, from ../utils.py
        expected = ref_kernel(data)
        if late_helper(output, expected):
            return ""
        return "mismatch: custom_kernel(data) differs from ref_kernel(data)"
"""


def test_gpumode_files_from_elsewhere_and_call_time_imports(tmp_path, gm_rt):
    torch = require_module("torch")
    group = tmp_path / "group"
    _write(group / "utils.py", _SHARED_UTILS)
    root = group / "triple_py"
    _write(root / "task.py", "import torch\ninput_t = dict\noutput_t = torch.Tensor\n")
    _gpumode(root, """
        files:
          - {"name": "submission.py", "source": "@SUBMISSION@"}
          - {"name": "task.py", "source": "task.py"}
          - {"name": "utils.py", "source": "../utils.py"}
          - {"name": "reference.py", "source": "reference.py"}
          - {"name": "eval.py", "source": "../eval.py"}
        lang: "py"
        config:
          main: "eval.py"
        tests:
          - {"n": 5, "seed": 1}
        benchmarks:
          - {"n": 4096, "seed": 2}
    """, _STAGED_REF)
    p = load_problem(root)
    assert p.options["files"] == {"task.py": "task.py", "utils.py": "../utils.py", "reference.py": "reference.py"}
    # gm_rt imported the vectoradd example's own task and utils modules into this process first
    rt = runtime_for(p)
    case = p.cases[0]
    inputs = rt.make_inputs(case, 4, "cpu")
    expected = rt.reference(inputs, case, 4)
    assert torch.equal(expected, inputs[0]["x"] * 3)
    assert rt.check(inputs, expected.clone(), expected, case) == (True, "")
    ok, message = rt.check(inputs, expected + 1, expected, case)
    assert not ok and message.startswith("mismatch")


def test_gpumode_problem_that_needs_a_gpu(tmp_path):
    torch = require_module("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    ref = _REF.replace("return (torch.randn(size, generator=g),)",
                       "return (torch.randn(size, device='cuda'),)")
    rt = runtime_for(load_problem(_gpumode(tmp_path / "prob", "tests:\n  - {size: 8, seed: 1}\n", ref)))
    with pytest.raises(UsageError) as e:
        rt.make_inputs(rt.problem.cases[0], 1, "cpu")
    _one_line(e.value, "needs a GPU", "line 5", "generate_input(size=8)")


def test_gpumode_generate_input_failure_is_a_problem_error(tmp_path):
    require_module("torch")
    rt = runtime_for(load_problem(_gpumode(tmp_path / "prob", "tests:\n  - {size: 8, dtype: fp4, seed: 1}\n")))
    with pytest.raises(InputFormatError) as e:
        rt.make_inputs(rt.problem.cases[0], 1, "cpu")
    _one_line(e.value, "generate_input(size=8, dtype='fp4') failed", "TypeError")


# ------------------------------------------------------------------------------------------------- helpers

@pytest.mark.parametrize("result, expected", [
    (None, (True, "")),
    ("", (True, "")),
    ("mismatch found!", (False, "mismatch found!")),
    (True, (True, "")),
    (False, (False, "check_implementation returned False")),
    ((True, ""), (True, "")),
    ((True, "Maximum error: 0.001"), (True, "Maximum error: 0.001")),
    ((False, "bad"), (False, "bad")),
    ((False, ""), (False, "check_implementation reported a mismatch")),
    ((False, ["SIZE MISMATCH", "more"]), (False, "SIZE MISMATCH; more")),
    (3.5, (False, "check_implementation returned a float, which kernelpilot cannot read (expected (ok, message), "
                  "a message, None or a bool)")),
])
def test_normalize_check(result, expected):
    assert gpumode.normalize_check(result) == expected


@dataclass
class _Cfg:
    scale: float
    weight: object


_Pair = namedtuple("_Pair", "left right")


def test_clone_data_copies_every_tensor():
    torch = require_module("torch")
    w = torch.randn(3, 4).t()                         # a transposed view: strides are kept
    leaf = torch.randn(2, requires_grad=True)
    data = (torch.arange(4), [leaf, {"k": torch.ones(2)}], _Cfg(2.0, w), _Pair(torch.zeros(1), 7), "tag")
    copy = gpumode.clone_data(data)
    assert isinstance(copy, tuple) and isinstance(copy[1], list) and isinstance(copy[2], _Cfg)
    assert isinstance(copy[3], _Pair) and copy[3].right == 7 and copy[4] == "tag"
    pairs = [(data[0], copy[0]), (leaf, copy[1][0]), (data[1][1]["k"], copy[1][1]["k"]), (w, copy[2].weight),
             (data[3].left, copy[3].left)]
    for orig, new in pairs:
        assert torch.equal(orig.detach(), new.detach()) and orig.data_ptr() != new.data_ptr()
    assert copy[2].weight.stride() == w.stride()
    assert copy[1][0].requires_grad and copy[1][0].is_leaf
    assert copy[2].scale == 2.0


def test_compile_baseline_never_falls_back_to_eager_silently():
    """Dynamo runs a function eagerly after 8 recompiles; a baseline gets room for every case, or fails."""
    import torch._dynamo.config as dynamo

    from kernelpilot.evaluate.formats import torch_compiled

    fn = torch_compiled(lambda x: x + 1)
    assert callable(fn)
    assert dynamo.recompile_limit >= 256 and dynamo.fail_on_recompile_limit_hit is True
    import torch._inductor.config as inductor

    assert inductor.compile_threads == 1        # compiled in the process: no pool of compile workers


@pytest.mark.gpu
def test_compile_baseline_is_timed_on_every_case_in_the_box(tmp_path):
    """torch.compile as a baseline over cases whose rows, columns and dtype change, in the box, with CUDA graphs:
    every case recompiles or runs the dynamic graph, and each gets a baseline time (a baseline that cannot compile
    a case leaves a note saying so instead)."""
    from kernelpilot.evaluate.runner import EvalOptions, bench

    shapes = [(rows, cols, dtype) for dtype in ("float32", "float16") for cols in (128, 384, 1000)
              for rows in (64, 96, 1000)]
    cases = "".join(f'\n[[cases]]\nrows = {r}\ncols = {c}\ndtype = "{d}"\n' for r, c, d in shapes)
    toml = (PROBLEMS / "row_softmax" / "problem.toml").read_text()
    _write(tmp_path / "p" / "problem.toml", toml[:toml.index("[[cases]]")] + cases)
    _write(tmp_path / "p" / "reference.py", (PROBLEMS / "row_softmax" / "reference.py").read_text())

    res = bench(tmp_path / "p", tmp_path / "p" / "reference.py",
                EvalOptions(baselines=("compile",), graphs=True, budget=0.05))
    assert res.error is None and len(res.bench) == len(shapes), (res.error, res.notes)
    assert not [n for n in res.notes if "could not be timed" in n], res.notes
    assert all("compile" in b.baselines and b.baselines["compile"].graph_timing is not None for b in res.bench), res.notes

def test_gpumode_output_buffer_among_the_inputs_through_the_harness():
    """GPU MODE's problems return their output buffer among the data, made with torch.empty and never written: the
    candidate's and the reference's processes must still agree on the inputs (their bytes are filled while
    generate_input runs), so a correct submission passes and a wrong one fails on its values."""
    require_module("torch")
    require_module("triton")
    from kernelpilot.evaluate.runner import EvalOptions, check

    opts = EvalOptions(device="cpu", seeds=1, cases=["size=127", "size=128"])
    good = check(GM_DIR, GM_DIR / "submission_triton.py", opts)
    assert good.passed and good.correct, [(c.case, c.message) for c in good.cases]
    wrong = check(GM_DIR, GM_DIR / "submission_wrong.py", opts)
    assert not wrong.correct
    assert not [f for f in good.flags + wrong.flags if f.id == "input-mismatch"]
    by_case = {c.case: c for c in wrong.cases}
    assert not by_case["size=127"].ok and "mismatch" in by_case["size=127"].message
    assert by_case["size=128"].ok            # 128 x 128 is a whole number of the wrong kernel's blocks


def test_a_submission_wrong_only_on_the_benchmark_sizes_fails_the_check():
    """Right on every test size, wrong on the benchmark sizes: check covers the shapes that get timed too, with one
    secret seed each."""
    require_module("torch")
    from kernelpilot.evaluate.runner import EvalOptions, check

    res = check(GM_DIR, GM_DIR / "submission_wrong_on_benchmarks.py", EvalOptions(device="cpu", seeds=1))
    by_case = {c.case: c for c in res.cases}
    assert not res.correct and not res.passed
    assert all(by_case[n].ok for n in ("size=127", "size=128", "size=129", "size=256"))
    assert {n for n, c in by_case.items() if not c.ok} == {"size=1024", "size=2048", "size=4096"}
    assert [c.seed for c in res.cases if c.case == "size=4096"] != [2146]      # never the published seed
