"""AMD occupancy against the compiler's own `; Occupancy:` on gfx942 (and gfx90a), for kernels whose
occupancy is limited by different resources: VGPRs, LDS, workgroup size, and none."""

from __future__ import annotations

import functools

import pytest
from conftest import require_tool

from kernelpilot.arch.occupancy import amd_compiler_occupancy
from kernelpilot.arch.registry import get_arch
from kernelpilot.isa import analyze

TEMPLATE = r"""
#include <hip/hip_runtime.h>
// VGPR pressure from LIVE independent accumulators; LDS from a static buffer of LDS_FLOATS floats.
extern "C" __global__ void __launch_bounds__(BOUND) occ_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int t = __builtin_amdgcn_workitem_id_x();
    int i = __builtin_amdgcn_workgroup_id_x() * BOUND + t;
    float acc[LIVE];
#pragma unroll
    for (int j = 0; j < LIVE; ++j) acc[j] = x[(i + j * 61) & (n - 1)];
    for (int it = 0; it < 8; ++it) {
#pragma unroll
        for (int j = 0; j < LIVE; ++j) acc[j] = acc[j] * acc[(j + 3) % LIVE] + x[(it * LIVE + j) & (n - 1)];
    }
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < LIVE; ++j) s += acc[j];
#if LDS_FLOATS > 0
    __shared__ float buf[LDS_FLOATS];
    for (int k = t; k < LDS_FLOATS; k += BOUND) buf[k] = s + k;
    __syncthreads();
    s += buf[(t * 7) % LDS_FLOATS];
#endif
    y[i] = s;
}
"""

# (launch bound, live accumulators, LDS floats): chosen to bind on different resources.
CASES = [
    (256, 4, 0),        # nothing binds: 8 waves
    (256, 96, 0),       # VGPRs
    (256, 160, 0),      # more VGPRs
    (1024, 24, 0),      # large workgroups
    (256, 4, 8192),     # 32 KiB LDS per workgroup
    (64, 4, 6144),      # 24 KiB LDS, one-wave workgroups
    (512, 40, 4096),    # VGPRs and LDS together
]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """``report(arch, bound, live, lds)``: the analysis of TEMPLATE built so, each built once in the module."""
    require_tool("clang++")
    src = tmp_path_factory.mktemp("occ") / "occ.hip"
    src.write_text(TEMPLATE)

    @functools.cache
    def build(arch: str, bound: int, live: int, lds: int):
        (rep,) = analyze(src, arch=arch, defines={"BOUND": str(bound), "LIVE": str(live), "LDS_FLOATS": str(lds)})
        return rep

    return build


@pytest.mark.parametrize("arch", ["gfx942", pytest.param("gfx90a", marks=pytest.mark.golden)])
@pytest.mark.parametrize("bound,live,lds", CASES)
def test_occupancy_agrees_with_compiler(report, arch, bound, live, lds):
    defines = {"BOUND": str(bound), "LIVE": str(live), "LDS_FLOATS": str(lds)}
    rep = report(arch, bound, live, lds)
    r = rep.resources
    compiler = rep.occupancy.compiler
    assert compiler is not None
    predicted = amd_compiler_occupancy(
        get_arch(arch), vgpr=r.vgpr, agpr=r.agpr or 0, sgpr=r.sgpr or 0, lds_bytes=r.lds_bytes or 0,
        flat_workgroup_size=(1, bound), accum_offset=r.accum_offset,
    )
    assert predicted == compiler, (defines, r)
    # At the launch-bound block size the occupancy can only be at or below the compiler's best case.
    assert rep.occupancy.block_size == bound
    assert rep.occupancy.active <= compiler
    if lds == 0 and bound <= 256:
        # Nothing but registers can bind: the launch number is the compiler's.
        assert rep.occupancy.active == compiler


def test_cases_cover_several_limiters(report):
    limiters = set()
    values = set()
    for bound, live, lds in CASES:
        rep = report("gfx942", bound, live, lds)
        limiters.add(rep.occupancy.limiter)
        values.add(rep.occupancy.compiler)
    assert {"vgpr", "lds"} <= limiters, limiters
    assert len(values) >= 3, values
