"""Samples of timed outputs (evaluate/sampling.py): taken in the candidate's process after each timed call, judged
in the reference's against the same elements of its own output. An honest output never fails; a stale one, a
wrong shape or dtype, and a malformed sample do."""

from __future__ import annotations

import json

import pytest
from conftest import require_module

from kernelpilot.evaluate.problem import Tolerance
from kernelpilot.evaluate.sampling import PARTS, PER_TENSOR, check_sample, positions, take_sample

torch = require_module("torch")

TOL = lambda dtype: Tolerance(1e-5, 1e-5) if "float32" in dtype else Tolerance(1e-2, 1e-2)  # noqa: E731


def _round_trip(out, nonce=0x1234_5678_9ABC):
    """A sample as the parent receives it: through JSON, like every journal record."""
    return json.loads(json.dumps(take_sample(out, nonce)))


def test_positions_are_fixed_by_the_nonce_and_cover_small_tensors():
    a = positions(7, 10**9)
    assert a == positions(7, 10**9) and a != positions(8, 10**9)
    assert len(a) == PER_TENSOR and all(0 <= i < 10**9 for i in a) and len(set(a)) > PER_TENSOR - 3
    assert positions(7, 5) == [0, 1, 2, 3, 4]
    assert positions(7, 0) == []


@pytest.mark.parametrize("make", [
    lambda: torch.softmax(torch.randn(64, 128), -1),
    lambda: torch.randn(300, 7).to(torch.bfloat16),
    lambda: torch.randn(33, 65).half().t(),                      # not contiguous
    lambda: (torch.randn(4, 4), torch.arange(10), {"mask": torch.rand(9) > 0.5, "n": 3}),
    lambda: torch.tensor(2.5),
    lambda: torch.randn(3, 5, dtype=torch.complex64),
    lambda: torch.empty(0, 8),
], ids=["float32", "bfloat16", "transposed-half", "nested", "scalar", "complex", "empty"])
def test_an_output_passes_against_itself(make):
    out = make()
    cmp = check_sample(_round_trip(out), out, TOL)
    assert cmp.ok, cmp.message


def test_a_stale_output_fails_with_the_elements_named():
    x, y = torch.randn(64, 128), torch.randn(64, 128)
    cmp = check_sample(_round_trip(torch.softmax(x, -1)), torch.softmax(y, -1), TOL)
    assert not cmp.ok and "sampled elements outside" in cmp.message
    assert cmp.worst and len(cmp.worst[0]["index"]) == 2      # a position in the output, not in the sample


def test_differences_within_the_tolerance_pass_and_beyond_it_fail():
    e = torch.rand(1000)
    assert check_sample(_round_trip(e + 5e-6), e, TOL).ok
    assert not check_sample(_round_trip(e + 1e-3), e, TOL).ok
    ints = torch.arange(30)                 # fewer elements than a sample takes: every one is compared
    off = ints.clone()
    off[17] += 1
    cmp = check_sample(_round_trip(off), ints, TOL)
    assert not cmp.ok and "exact match" in cmp.message and cmp.worst[0]["index"] == [17]


def test_nan_only_where_the_reference_has_nan():
    e = torch.tensor([1.0, float("nan"), 3.0])
    assert check_sample(_round_trip(e.clone()), e, TOL).ok
    assert not check_sample(_round_trip(torch.tensor([float("nan"), float("nan"), 3.0])), e, TOL).ok


@pytest.mark.parametrize("got, why", [
    (torch.zeros(4, 4, dtype=torch.float64), "dtype float64"),
    (torch.zeros(2, 8), "shape (2, 8)"),
    ((torch.zeros(4, 4), torch.zeros(1)), "parts"),
])
def test_a_different_shape_dtype_or_structure_fails(got, why):
    cmp = check_sample(_round_trip(got), torch.zeros(4, 4), TOL)
    assert not cmp.ok and why in cmp.message


@pytest.mark.parametrize("sample", [None, {}, {"nonce": "x", "parts": 1, "leaves": []},
                                    {"nonce": 1, "parts": 1, "leaves": [{"path": "out"}]},
                                    {"nonce": 1, "parts": 1, "leaves": [{"index": 0, "path": "out"}]},
                                    {"nonce": 1, "parts": 1, "leaves": [{"index": 0, "path": "out", "dtype": "float32",
                                                                         "shape": [4], "values": "not base64!"}]}])
def test_a_malformed_sample_fails_without_raising(sample):
    cmp = check_sample(sample, torch.zeros(4), TOL)
    assert not cmp.ok and cmp.message


def test_plain_values_compare_as_the_full_comparison_does():
    # a float within the float64 tolerance passes (as compare_outputs lets it), an int must be equal
    assert check_sample(_round_trip((torch.ones(3), 0.1 + 0.2, 7)), (torch.ones(3), 0.3, 7), TOL).ok
    cmp = check_sample(_round_trip((torch.ones(3), 0.5, 7)), (torch.ones(3), 0.3, 7), TOL)
    assert not cmp.ok and "0.5, expected 0.3" in cmp.message
    assert not check_sample(_round_trip((torch.ones(3), 0.3, 8)), (torch.ones(3), 0.3, 7), TOL).ok
    assert check_sample(_round_trip({"name": "x", "t": torch.zeros(2)}), {"name": "x", "t": torch.zeros(2)}, TOL).ok


def test_an_output_of_many_parts_is_sampled_on_a_few_chosen_by_the_nonce():
    out = [torch.full((8,), float(i)) for i in range(1000)]
    sample = _round_trip(out, nonce=12345)
    assert sample["parts"] == 1000 and 1 <= len(sample["leaves"]) <= PARTS
    assert len(json.dumps(sample)) < 2000                    # a record stays small however many parts
    assert check_sample(sample, out, TOL).ok
    stale = [t + 1 for t in out]
    assert not check_sample(sample, stale, TOL).ok           # whichever parts were chosen, they are compared
    # a record that picks its own (easy) parts is refused
    forged = dict(sample, leaves=[dict(leaf, index=leaf["index"] + 1) for leaf in sample["leaves"]])
    cmp = check_sample(forged, out, TOL)
    assert not cmp.ok and "not the parts its nonce picks" in cmp.message

