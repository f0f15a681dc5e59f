"""Tests for kernelpilot.arch: the facts file, the registry, the occupancy calculators and `kpilot arch`.

Occupancy is checked against real tool output, not against itself:
- Nsight Compute on an H200 (tests/fixtures/ncu_vectoradd: the Occupancy section and its graphs);
- the CUDA runtime's own cudaOccupancyMaxActiveBlocksPerMultiprocessor on an H200 (6,300 launches, below);
- four more Nsight Compute launches on the same H200 (below);
- the LLVM AMDGPU backend's own test of its `; Occupancy:` comment (llvm/test/CodeGen/AMDGPU/occupancy-levels.ll).
"""

from __future__ import annotations

import json
import re

import click
import pytest
from click.testing import CliRunner

from kernelpilot.arch.occupancy import (
    amd_compiler_occupancy,
    amd_occupancy,
    amd_sgpr_wave_limit,
    nvidia_driver_carveout,
    nvidia_occupancy,
)
from kernelpilot.arch.registry import (
    AMD_ARCH_FACTS,
    GPU_FACTS,
    NVIDIA_ARCH_FACTS,
    ArchSpec,
    Fact,
    GPUSpec,
    get_arch,
    get_gpu,
    known_names,
    list_archs,
    list_gpus,
    resolve,
)
from kernelpilot.errors import UnknownArchError, UsageError
from conftest import NCU_VECTORADD

PRODUCTS = ["a100", "l40s", "h100", "h200", "b200", "mi250x", "mi300x", "mi355x"]
ARCHS = ["sm_80", "sm_89", "sm_90", "sm_100", "gfx90a", "gfx942", "gfx950"]


# ------------------------------------------------------------------------------------------- facts file


def test_every_product_and_arch_is_there():
    assert [g.key for g in list_gpus()] == PRODUCTS
    assert [a.name for a in list_archs()] == ARCHS


@pytest.mark.parametrize("key", PRODUCTS)
def test_product_has_every_fact_with_a_source(key):
    gpu = get_gpu(key)
    for name in GPU_FACTS:
        fact = gpu.fact(name)
        assert fact.source.title.strip() and fact.source.url.strip(), name
        if fact.value is None:  # only "does not exist here", and then it says why
            assert name == "peak_fp8_tflops" and fact.note
        else:
            assert isinstance(fact.value, (int, float)) and fact.value > 0, name
    for fact in gpu.facts.values():
        assert fact.source.title and fact.source.url


@pytest.mark.parametrize("name", ARCHS)
def test_arch_has_its_vendor_facts_with_sources(name):
    spec = get_arch(name)
    required = NVIDIA_ARCH_FACTS if spec.vendor == "nvidia" else AMD_ARCH_FACTS
    for fact_name in required:
        fact = spec.fact(fact_name)
        assert fact.value is not None and fact.source.title and fact.source.url, fact_name
    assert spec.products, "every arch has at least one product"


def test_key_facts_have_the_documented_values():
    h200 = get_gpu("h200")
    assert (h200.sm_count, h200.memory_gb, h200.memory_bandwidth_tbps) == (132, 141, 4.8)
    assert h200.peak_bf16_tflops == 989.5 and "sparsity" in h200.fact("peak_bf16_tflops").note
    assert get_gpu("a100").peak_fp8_tflops is None
    mi300x = get_gpu("mi300x")
    assert mi300x.sm_count == 304 and mi300x.infinity_cache_bytes == 256 * 2**20
    assert get_gpu("mi355x").sm_count == 256
    sm90 = get_arch("sm_90")
    assert (sm90.registers_per_sm, sm90.max_warps_per_sm, sm90.max_blocks_per_sm) == (65536, 64, 32)
    assert sm90.shared_carveouts_kb[-1] * 1024 == sm90.shared_memory_per_sm_bytes == 233472
    assert get_arch("sm_89").max_warps_per_sm == 48
    assert get_arch("gfx942").lds_per_cu_bytes == 65536
    assert get_arch("gfx950").lds_per_cu_bytes == 160 * 1024
    assert get_arch("gfx90a").vgprs_per_simd_lane == 512


def test_h200_facts_match_the_device_ncu_read():
    """The sm_90 facts cite the ncu fixture's device attributes: check they say what we claim."""
    import csv

    rows = list(csv.reader((NCU_VECTORADD / "ncu_raw.csv").open()))
    attrs = {h: v.replace(",", "") for h, v in zip(rows[0], rows[2]) if h.startswith("device__attribute_")}
    sm90, h200 = get_arch("sm_90"), get_gpu("h200")
    assert int(attrs["device__attribute_multiprocessor_count"]) == h200.sm_count
    assert int(attrs["device__attribute_l2_cache_size"]) == h200.l2_cache_bytes
    assert int(attrs["device__attribute_max_shared_memory_per_multiprocessor"]) == sm90.shared_memory_per_sm_bytes
    assert int(attrs["device__attribute_max_shared_memory_per_block_optin"]) == sm90.shared_memory_per_block_optin_bytes
    assert int(attrs["device__attribute_reserved_shared_memory_per_block"]) == sm90.reserved_shared_per_block_bytes
    assert int(attrs["device__attribute_max_registers_per_multiprocessor"]) == sm90.registers_per_sm
    assert int(attrs["device__attribute_max_warps_per_multiprocessor"]) == sm90.max_warps_per_sm
    assert int(attrs["device__attribute_max_blocks_per_multiprocessor"]) == sm90.max_blocks_per_sm
    assert int(attrs["device__attribute_num_schedulers_per_multiprocessor"]) == sm90.schedulers_per_sm
    assert int(attrs["device__attribute_max_gpu_frequency_khz"]) == h200.boost_clock_mhz * 1000


# --------------------------------------------------------------------------------------------- registry


@pytest.mark.parametrize(
    "name, arch, target, gpu",
    [
        ("sm_90", "sm_90", "sm_90", None),
        ("SM_90A", "sm_90", "sm_90a", None),
        ("sm90a", "sm_90", "sm_90a", None),
        ("sm_100a", "sm_100", "sm_100a", None),
        ("sm_80", "sm_80", "sm_80", None),
        ("gfx942", "gfx942", "gfx942", None),
        ("GFX942:sramecc+:xnack-", "gfx942", "gfx942:sramecc+:xnack-", None),
        ("H200", "sm_90", "sm_90", "h200"),
        ("h100", "sm_90", "sm_90", "h100"),
        ("NVIDIA H100 SXM5 80GB", "sm_90", "sm_90", "h100"),
        ("h200-sxm", "sm_90", "sm_90", "h200"),
        ("a100", "sm_80", "sm_80", "a100"),
        ("A100 SXM4", "sm_80", "sm_80", "a100"),
        ("L40S", "sm_89", "sm_89", "l40s"),
        ("b200", "sm_100", "sm_100", "b200"),
        ("mi300x", "gfx942", "gfx942", "mi300x"),
        ("MI300X", "gfx942", "gfx942", "mi300x"),
        ("AMD Instinct MI300X", "gfx942", "gfx942", "mi300x"),
        ("mi250x", "gfx90a", "gfx90a", "mi250x"),
        ("MI355X", "gfx950", "gfx950", "mi355x"),
    ],
)
def test_names_resolve(name, arch, target, gpu):
    spec, product = resolve(name)
    assert (spec.name, spec.target) == (arch, target)
    assert spec.vendor == ("nvidia" if arch.startswith("sm_") else "amd")
    assert get_arch(name).name == arch
    assert (product.key if product else None) == gpu
    if gpu:
        assert get_gpu(name).key == gpu


def test_get_gpu_with_an_isa_name():
    assert get_gpu("gfx942").key == "mi300x"  # one product: that one
    with pytest.raises(UsageError) as e:
        get_gpu("sm_90")  # H100 and H200 share it
    assert "h100" in str(e.value) and "h200" in str(e.value)


@pytest.mark.parametrize("name", ["sm_75", "gfx1100", "rtx4090", "", "h300"])
def test_unknown_names_raise_and_list_known(name):
    with pytest.raises(UnknownArchError) as e:
        get_arch(name)
    assert e.value.name == name
    assert e.value.known == known_names()
    assert "sm_90" in e.value.known and "h200" in e.value.known and "mi300x" in e.value.known
    assert "sm_90" in str(e.value) and "kpilot arch list" in str(e.value)


def test_facts_are_attributes_and_carry_sources():
    spec = get_arch("sm_90a")
    f = spec.fact("max_warps_per_sm")
    assert isinstance(f, Fact) and f.value == 64 == spec.max_warps_per_sm
    assert f.to_json() == {"value": 64, "source": {"title": f.source.title, "url": f.source.url}}
    with pytest.raises(AttributeError):
        spec.no_such_fact  # noqa: B018
    with pytest.raises(KeyError):
        spec.fact("no_such_fact")
    assert isinstance(spec, ArchSpec) and isinstance(spec.products[0], GPUSpec)
    assert get_arch("sm_90") is get_arch("sm_90")  # loaded once


def test_specs_pickle():
    import pickle

    spec = get_arch("sm_90a")
    back = pickle.loads(pickle.dumps(spec))
    assert back == spec and back.max_warps_per_sm == 64 and back.target == "sm_90a"


# ------------------------------------------------------------------------- NVIDIA: Nsight Compute fixture


def _ncu_launches(text: str) -> list[dict[str, str]]:
    """Each launch's Launch Statistics and Occupancy metrics, by name, from `ncu --page details`."""
    launches = []
    for block in re.split(r"\n  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\).*\n", text)[1:]:
        metrics: dict[str, str] = {}
        for section in ("Launch Statistics", "Occupancy"):
            body = block.split(f"Section: {section}\n", 1)[1].split("\n\n", 1)[0]
            for line in body.splitlines():
                m = re.match(r"\s{4}(\S.*?)\s{2,}(?:\S+\s{2,})?([\d,.]+)\s*$", line)
                if m:
                    metrics[m.group(1).strip()] = m.group(2).replace(",", "")
        launches.append(metrics)
    return launches


def _ncu_series(text: str, name: str) -> list[int]:
    """One of the Occupancy section's graph series ("# Warps Per Register Count (64; 64; ...)")."""
    start = text.index(name)
    body = text[text.index("(", start) + 1: text.index(")", start)]
    return [int(v) for v in body.replace("\n", " ").split(";")]


@pytest.fixture(scope="module")
def ncu_text() -> str:
    return (NCU_VECTORADD / "ncu_details.txt").read_text()


def test_reproduces_every_ncu_occupancy_number(ncu_text):
    sm90 = get_arch("sm_90")
    launches = _ncu_launches(ncu_text)
    assert len(launches) == 2
    for m in launches:
        config = round(float(m["Shared Memory Configuration Size"]) * 1000)  # Kbyte = 1000 bytes in ncu
        occ = nvidia_occupancy(
            sm90,
            registers=int(m["Registers Per Thread"]),
            shared_bytes=int(m["Static Shared Memory Per Block"]),
            dynamic_shared_bytes=int(m["Dynamic Shared Memory Per Block"]),
            block_size=int(m["Block Size"]),
            shared_config_bytes=config // 1024 * 1024,
        )
        assert occ.limits == {
            "registers": int(m["Block Limit Registers"]),
            "shared_memory": int(m["Block Limit Shared Mem"]),
            "warps": int(m["Block Limit Warps"]),
            "blocks": int(m["Block Limit SM"]),
        }
        assert occ.active == int(m["Theoretical Active Warps per SM"])
        assert occ.percent == float(m["Theoretical Occupancy"])
        assert occ.active // sm90.schedulers_per_sm == int(m["Theoretical Warps Per Scheduler"])
        # The driver's carveout choice, inferred, gives the same configuration.
        assert nvidia_driver_carveout(sm90, registers=16, shared_bytes=0, block_size=256) == config // 1024 * 1024


def test_reproduces_ncu_register_count_graph(ncu_text):
    """'# Warps Per Register Count': warps per SM for 0..256 registers at this launch's block of 256."""
    sm90 = get_arch("sm_90")
    series = _ncu_series(ncu_text, "# Warps Per Register Count")
    assert len(series) == 257
    for regs, warps in enumerate(series[:256]):
        occ = nvidia_occupancy(sm90, registers=regs, shared_bytes=0, block_size=256, shared_config_bytes=32768)
        assert occ.active == warps, regs
    pct = _ncu_series(ncu_text, "% Occupancy Per Register Count")
    assert [int(w * 100 / 64) for w in series] == pct


def test_reproduces_ncu_block_size_graph(ncu_text):
    """'# Warps Per Block Size': block sizes 16, 32, ... 1024 (16 per step) with 16 registers."""
    sm90 = get_arch("sm_90")
    series = _ncu_series(ncu_text, "# Warps Per Block Size")
    assert len(series) == 65
    for i, warps in enumerate(series[1:], start=1):
        occ = nvidia_occupancy(sm90, registers=16, shared_bytes=0, block_size=16 * i, shared_config_bytes=32768)
        assert occ.active == warps, 16 * i


def test_reproduces_ncu_shared_memory_graph(ncu_text):
    """'# Warps Per Shared Mem Size': per-block allocations of 512 B steps (the 1 KB driver reserve
    included) in the 32 KB configuration; above 32 KB the driver takes a larger carveout. Points past
    48 KB are left out: ncu caps them at the 48 KB a kernel gets without opting in."""
    sm90 = get_arch("sm_90")
    series = _ncu_series(ncu_text, "# Warps Per Shared Mem Size")
    assert len(series) == 456
    for i in range(2, 97):
        occ = nvidia_occupancy(sm90, registers=16, shared_bytes=512 * i - 1024, block_size=256,
                               shared_config_bytes=32768)
        assert occ.active == series[i], 512 * i


# Four more launches Nsight Compute 2025.3.1 profiled on the same H200 (driver 580, CUDA 13.0; sm_90 build):
# (registers as ncu reports them, static shared, dynamic shared, block size)
#   -> (Shared Memory Configuration Size KB, Block Limit Registers, Shared Mem, Warps, SM, active warps)
NCU_H200_LAUNCHES = [
    ((64, 0, 0, 256), (32, 4, 32, 8, 32, 32)),
    ((128, 0, 60000, 256), (132, 2, 2, 8, 32, 16)),
    ((16, 10000, 0, 128), (196, 32, 18, 16, 32, 64)),
    ((254, 0, 20000, 256), (32, 1, 1, 8, 32, 8)),
]


@pytest.mark.parametrize("launch, expected", NCU_H200_LAUNCHES)
def test_reproduces_more_ncu_launches(launch, expected):
    regs, static, dynamic, block = launch
    config_kb, *limits, active = expected
    sm90 = get_arch("sm_90")
    kw = dict(registers=regs, shared_bytes=static, dynamic_shared_bytes=dynamic, block_size=block)
    assert nvidia_driver_carveout(sm90, **kw) == config_kb * 1024
    occ = nvidia_occupancy(sm90, shared_config_bytes="driver", **kw)
    assert list(occ.limits.values()) == limits and occ.active == active
    # the default (largest) carveout never changes the occupancy, only ncu's shared-memory limit
    assert nvidia_occupancy(sm90, **kw).active == active


# cudaOccupancyMaxActiveBlocksPerMultiprocessor on the H200 (CUDA 13.0, driver 580) for kernels built with
# __maxnreg__(R) (their register counts below, from cudaFuncGetAttributes) and one with 10,000 bytes of static
# shared memory, for every block size in CUDA_BLOCK_SIZES x dynamic shared memory in CUDA_DYNAMIC_SHARED
# (after cudaFuncSetAttribute(MaxDynamicSharedMemorySize, 227 KB - static)). Each string holds the blocks per
# SM the runtime returned, one base-36 digit per (block size, dynamic shared) pair, block size outer.
CUDA_BLOCK_SIZES = [32, 33, 64, 96, 100, 128, 160, 192, 224, 256, 288, 320, 384, 448, 512, 544, 640, 768, 800,
                    1000, 1024]
CUDA_DYNAMIC_SHARED = [0, 1, 1000, 3072, 4096, 8192, 20000, 29000, 30000, 49152, 50000, 60000, 76800, 77000,
                       100000, 116000, 117000, 150000, 200000, 232448]
CUDA_RUNTIME_H200 = [
    (24, 0, (
        "wwwwwpb7744332211111wwwwwpb7744332211111wwwwwpb7744332211111llllllb7744332211111"
        "ggggggb7744332211111ggggggb7744332211111ccccccb7744332211111aaaaaaa7744332211111"
        "99999997744332211111888888877443322111117777777774433221111166666666644332211111"
        "55555555544332211111444444444443322111114444444444433221111133333333333332211111"
        "33333333333332211111222222222222222111112222222222222221111122222222222222211111"
        "22222222222222211111"
    )),
    (32, 0, (
        "wwwwwpb7744332211111wwwwwpb7744332211111wwwwwpb7744332211111llllllb7744332211111"
        "ggggggb7744332211111ggggggb7744332211111ccccccb7744332211111aaaaaaa7744332211111"
        "99999997744332211111888888877443322111117777777774433221111166666666644332211111"
        "55555555544332211111444444444443322111114444444444433221111133333333333332211111"
        "33333333333332211111222222222222222111112222222222222221111122222222222222211111"
        "22222222222222211111"
    )),
    (40, 0, (
        "wwwwwpb7744332211111oooooob7744332211111oooooob7744332211111ggggggb7744332211111"
        "ccccccb7744332211111ccccccb77443322111119999999774433221111188888887744332211111"
        "66666666644332211111666666666443322111115555555554433221111144444444444332211111"
        "44444444444332211111333333333333322111113333333333333221111122222222222222211111"
        "22222222222222211111222222222222222111111111111111111111111111111111111111111111"
        "11111111111111111111"
    )),
    (48, 0, (
        "wwwwwpb7744332211111kkkkkkb7744332211111kkkkkkb7744332211111ddddddb7744332211111"
        "aaaaaaa7744332211111aaaaaaa77443322111118888888774433221111166666666644332211111"
        "55555555544332211111555555555443322111114444444444433221111144444444444332211111"
        "33333333333332211111222222222222222111112222222222222221111122222222222222211111"
        "22222222222222211111111111111111111111111111111111111111111111111111111111111111"
        "11111111111111111111"
    )),
    (56, 0, (
        "wwwwwpb7744332211111iiiiiib7744332211111iiiiiib7744332211111ccccccb7744332211111"
        "99999997744332211111999999977443322111117777777774433221111166666666644332211111"
        "55555555544332211111444444444443322111114444444444433221111133333333333332211111"
        "33333333333332211111222222222222222111112222222222222221111122222222222222211111"
        "11111111111111111111111111111111111111111111111111111111111111111111111111111111"
        "11111111111111111111"
    )),
    (64, 0, (
        "wwwwwpb7744332211111ggggggb7744332211111ggggggb7744332211111aaaaaaa7744332211111"
        "88888887744332211111888888877443322111116666666664433221111155555555544332211111"
        "44444444444332211111444444444443322111113333333333333221111133333333333332211111"
        "22222222222222211111222222222222222111112222222222222221111111111111111111111111"
        "11111111111111111111111111111111111111111111111111111111111111111111111111111111"
        "11111111111111111111"
    )),
    (72, 0, (
        "ssssspb7744332211111eeeeeeb7744332211111eeeeeeb774433221111199999997744332211111"
        "77777777744332211111777777777443322111115555555554433221111144444444444332211111"
        "44444444444332211111333333333333322111113333333333333221111122222222222222211111"
        "22222222222222211111222222222222222111111111111111111111111111111111111111111111"
        "11111111111111111111111111111111111111111111111111111111111100000000000000000000"
        "00000000000000000000"
    )),
    (80, 0, (
        "oooooob7744332211111ccccccb7744332211111ccccccb774433221111188888887744332211111"
        "66666666644332211111666666666443322111114444444444433221111144444444444332211111"
        "33333333333332211111333333333333322111112222222222222221111122222222222222211111"
        "22222222222222211111111111111111111111111111111111111111111111111111111111111111"
        "11111111111111111111111111111111111111110000000000000000000000000000000000000000"
        "00000000000000000000"
    )),
    (96, 0, (
        "kkkkkkb7744332211111aaaaaaa7744332211111aaaaaaa774433221111166666666644332211111"
        "55555555544332211111555555555443322111114444444444433221111133333333333332211111"
        "22222222222222211111222222222222222111112222222222222221111122222222222222211111"
        "11111111111111111111111111111111111111111111111111111111111111111111111111111111"
        "11111111111111111111000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000"
    )),
    (128, 0, (
        "ggggggb7744332211111888888877443322111118888888774433221111155555555544332211111"
        "44444444444332211111444444444443322111113333333333333221111122222222222222211111"
        "22222222222222211111222222222222222111111111111111111111111111111111111111111111"
        "11111111111111111111111111111111111111111111111111111111111100000000000000000000"
        "00000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000"
    )),
    (168, 0, (
        "ccccccb7744332211111666666666443322111116666666664433221111144444444444332211111"
        "33333333333332211111333333333333322111112222222222222221111122222222222222211111"
        "11111111111111111111111111111111111111111111111111111111111111111111111111111111"
        "11111111111111111111000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000"
    )),
    (200, 0, (
        "88888887744332211111444444444443322111114444444444433221111122222222222222211111"
        "22222222222222211111222222222222222111111111111111111111111111111111111111111111"
        "11111111111111111111111111111111111111110000000000000000000000000000000000000000"
        "00000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000"
    )),
    (254, 0, (
        "88888887744332211111444444444443322111114444444444433221111122222222222222211111"
        "22222222222222211111222222222222222111111111111111111111111111111111111111111111"
        "11111111111111111111111111111111111111110000000000000000000000000000000000000000"
        "00000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "00000000000000000000"
    )),
    (10, 10000, (
        "kkjgfc75533322211110kkjgfc75533322211110kkjgfc75533322211110kkjgfc75533322211110"
        "ggggfc75533322211110ggggfc75533322211110cccccc75533322211110aaaaaa75533322211110"
        "99999975533322211110888888755333222111107777777553332221111066666665533322211110"
        "55555555533322211110444444444333222111104444444443332221111033333333333322211110"
        "33333333333322211110222222222222222111102222222222222221111022222222222222211110"
        "22222222222222211110"
    )),]


@pytest.mark.parametrize("registers, static, blocks", CUDA_RUNTIME_H200, ids=lambda v: str(v)[:12])
def test_matches_the_cuda_runtime_on_h200(registers, static, blocks):
    sm90 = get_arch("sm_90")
    pairs = [(b, d) for b in CUDA_BLOCK_SIZES for d in CUDA_DYNAMIC_SHARED]
    assert len(blocks) == len(pairs)
    for (block, dynamic), digit in zip(pairs, blocks):
        occ = nvidia_occupancy(sm90, registers=registers, shared_bytes=static, dynamic_shared_bytes=dynamic,
                               block_size=block)
        assert min(occ.limits.values()) == int(digit, 36), (registers, static, block, dynamic)
        assert occ.active == int(digit, 36) * -(-block // 32)


# --------------------------------------------------------------------------------- NVIDIA: by hand


def test_register_limited():
    occ = nvidia_occupancy(get_arch("sm_90"), registers=128, shared_bytes=0, block_size=256)
    # 128 x 32 = 4096 registers per warp; 16384 per scheduler -> 4 warps each, 16 per SM -> 2 blocks of 8
    assert (occ.active, occ.max, occ.percent, occ.limiter) == (16, 64, 25.0, "registers")
    assert occ.limits["registers"] == 2 and occ.unit == "warps_per_sm" and occ.block_size == 256
    # 3 blocks need 6 warps per scheduler: 16384 / 6 = 2730 -> 2560 per warp -> 80 registers
    assert occ.next_step.startswith("use 80 registers per thread or fewer to fit 3 blocks (24 warps)")


def test_register_rounding_is_per_warp_and_per_scheduler():
    sm90 = get_arch("sm_90")
    # 33 registers: 1056 -> 1280 per warp; 16384 // 1280 = 12 warps per scheduler, 48 per SM
    assert nvidia_occupancy(sm90, registers=33, shared_bytes=0, block_size=128).active == 48
    # 72 registers, 96 threads (3 warps): 2304 per warp -> 7 per scheduler = 28 per SM -> 9 blocks = 27 warps
    occ = nvidia_occupancy(sm90, registers=72, shared_bytes=0, block_size=96)
    assert occ.limits["registers"] == 9 and occ.active == 27


def test_shared_memory_limited():
    occ = nvidia_occupancy(get_arch("sm_90"), registers=32, shared_bytes=48 * 1024, dynamic_shared_bytes=12000,
                           block_size=256)
    # 49152 + 12000 + 1024 = 62176 -> 62208 allocated; 233472 // 62208 = 3 blocks
    assert (occ.limits["shared_memory"], occ.active, occ.limiter) == (3, 24, "shared_memory")
    # 4 blocks: 233472 // 4 = 58368 per block, less the 1 KB reserve
    assert occ.next_step.startswith("use 57344 bytes of shared memory per block (static + dynamic) or fewer to fit 4")
    a100 = nvidia_occupancy(get_arch("sm_80"), registers=32, shared_bytes=60000, block_size=256)
    assert a100.limits["shared_memory"] == 167936 // 61056 == 2


def test_warps_limited():
    occ = nvidia_occupancy(get_arch("sm_90"), registers=32, shared_bytes=0, block_size=1024)
    assert (occ.active, occ.percent, occ.limiter, occ.next_step) == (64, 100.0, "warps", None)
    # 640 threads = 20 warps: 3 blocks = 60 warps; 32 registers also allow exactly 3 (tie -> "registers")
    occ = nvidia_occupancy(get_arch("sm_90"), registers=32, shared_bytes=0, block_size=640)
    assert (occ.active, occ.limiter) == (60, "registers")
    assert occ.limits["registers"] == occ.limits["warps"] == 3
    assert "a block of 512 threads would fit 64 warps" in occ.next_step
    occ = nvidia_occupancy(get_arch("sm_90"), registers=24, shared_bytes=0, block_size=640)
    assert (occ.active, occ.limiter) == (60, "warps")


def test_blocks_limited():
    occ = nvidia_occupancy(get_arch("sm_90"), registers=32, shared_bytes=0, block_size=32)
    assert (occ.active, occ.percent, occ.limiter) == (32, 50.0, "blocks")
    assert "a block of 64 threads would fit 64 warps" in occ.next_step
    ada = nvidia_occupancy(get_arch("sm_89"), registers=32, shared_bytes=0, block_size=32)
    assert (ada.active, ada.max, ada.limiter) == (24, 48, "blocks")


def test_full_occupancy_names_warps_and_unused_resources_never_limit():
    sm90 = get_arch("sm_90")
    occ = nvidia_occupancy(sm90, registers=32, shared_bytes=0, block_size=256)  # registers also allow 8
    assert occ.limits["registers"] == occ.limits["warps"] == 8 and occ.limiter == "warps"
    occ = nvidia_occupancy(sm90, registers=0, shared_bytes=0, block_size=32)
    assert occ.limits["registers"] == 32 and occ.limiter == "blocks"


def test_partial_warps_and_a_block_that_cannot_launch():
    sm90 = get_arch("sm_90")
    assert nvidia_occupancy(sm90, registers=16, shared_bytes=0, block_size=33).limits["warps"] == 32
    occ = nvidia_occupancy(sm90, registers=255, shared_bytes=0, block_size=1024)
    assert (occ.active, occ.limits["registers"]) == (0, 0)
    assert occ.next_step.startswith("use 64 registers per thread or fewer to fit 1 block (32 warps)")
    occ = nvidia_occupancy(sm90, registers=16, shared_bytes=232448 - 1024, dynamic_shared_bytes=1025,
                           block_size=64)
    assert occ.active == 0 and occ.limiter == "shared_memory"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(registers=32, shared_bytes=0, block_size=1025), "1..1024"),
        (dict(registers=32, shared_bytes=0, block_size=0), "1..1024"),
        (dict(registers=256, shared_bytes=0, block_size=128), "255"),
        (dict(registers=-1, shared_bytes=0, block_size=128), ">= 0"),
        (dict(registers=32, shared_bytes=0, block_size=128, shared_config_bytes=5000), "one of"),
    ],
)
def test_nvidia_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        nvidia_occupancy(get_arch("sm_90"), **kwargs)
    with pytest.raises(ValueError, match="nvidia"):
        nvidia_occupancy(get_arch("gfx942"), registers=32, shared_bytes=0, block_size=128)


# ------------------------------------------------------------------------------------------------- AMD


@pytest.mark.parametrize(
    "kwargs, active, limiter",
    [
        (dict(vgpr=128), 4, "vgpr"),                        # 512 / 128
        (dict(vgpr=96, agpr=32), 4, "vgpr"),                # roundup(96, 4) + 32 = 128
        (dict(vgpr=97, agpr=32), 3, "vgpr"),                # 100 + 32 = 132 -> 136 -> 3
        (dict(vgpr=97, agpr=32, accum_offset=104), 3, "vgpr"),  # 136 -> 3
        (dict(vgpr=64, agpr=64, accum_offset=128), 2, "vgpr"),  # 192 -> 2
        (dict(vgpr=256, agpr=256), 1, "vgpr"),
        (dict(vgpr=5), 8, "waves"),                         # below one granule
        (dict(vgpr=64), 8, "waves"),
        (dict(vgpr=65), 7, "vgpr"),                         # 72 -> 7
        (dict(vgpr=32, sgpr=100), 8, "waves"),              # the GFX9 table: <= 100 -> 8
        (dict(vgpr=32, sgpr=102), 7, "sgpr"),
        (dict(vgpr=32, lds_bytes=20000), 3, "lds"),         # 3 groups x 4 waves / 4 SIMDs
        (dict(vgpr=32, lds_bytes=16384), 4, "lds"),
        (dict(vgpr=128, lds_bytes=16384), 4, "vgpr"),       # tie: vgpr first
        (dict(vgpr=32, lds_bytes=65536), 1, "lds"),
    ],
)
def test_amd_by_hand_gfx942(kwargs, active, limiter):
    occ = amd_occupancy(get_arch("gfx942"), block_size=256, **kwargs)
    assert (occ.unit, occ.max) == ("waves_per_simd", 8)
    assert (occ.active, occ.limiter) == (active, limiter)
    assert occ.percent == active / 8 * 100
    # the compiler, told the exact workgroup size, says the same
    assert amd_compiler_occupancy(get_arch("gfx942"), flat_workgroup_size=(256, 256), **kwargs) == active


def test_amd_workgroup_size_limits():
    gfx942 = get_arch("gfx942")
    occ = amd_occupancy(gfx942, vgpr=32, block_size=448)  # 7 waves: 4 groups = 28 of 32 slots
    assert (occ.active, occ.limiter, occ.limits["waves"]) == (7, "waves", 7)
    assert "512 threads would reach 8 waves" in occ.next_step
    # 3 single-wave groups in 64 KB of LDS: 3 waves per CU, which LLVM counts as ceil(3 / 4) = 1 per SIMD
    occ = amd_occupancy(gfx942, vgpr=32, lds_bytes=20000, block_size=64)
    assert (occ.active, occ.limiter) == (1, "lds")
    # gfx950 has 160 KB of LDS: the same kernel fits 8 groups
    assert amd_occupancy(get_arch("gfx950"), vgpr=32, lds_bytes=20000, block_size=256).active == 8
    assert amd_occupancy(get_arch("gfx950"), vgpr=32, lds_bytes=65536, block_size=256).active == 2
    assert amd_occupancy(get_arch("gfx90a"), vgpr=32, lds_bytes=65536, block_size=256).active == 1


def test_amd_next_steps():
    gfx942 = get_arch("gfx942")
    occ = amd_occupancy(gfx942, vgpr=128, block_size=256)
    assert occ.next_step.startswith("use 96 VGPRs in total (VGPRs + AGPRs) or fewer to reach 5 waves")
    occ = amd_occupancy(gfx942, vgpr=32, lds_bytes=30000, block_size=256)
    assert occ.next_step.startswith("use 21845 bytes of LDS per workgroup or fewer to fit 3 workgroups")
    occ = amd_occupancy(gfx942, vgpr=32, sgpr=102, block_size=256)
    assert occ.next_step.startswith("use 100 SGPRs or fewer")
    assert amd_occupancy(gfx942, vgpr=32, block_size=256).next_step is None


def test_amd_sgpr_rules():
    gfx942 = get_arch("gfx942")
    # Released LLVMs: table. LLVM main (2026): 800 / (roundup(n, 16) + 16 trap SGPRs on amdhsa).
    assert [amd_sgpr_wave_limit(gfx942, n) for n in (80, 88, 96, 100, 101)] == [8, 8, 8, 8, 7]
    assert [amd_sgpr_wave_limit(gfx942, n, "budget") for n in (80, 81, 96, 97, 112)] == [8, 7, 7, 6, 6]
    assert [amd_sgpr_wave_limit(gfx942, n, "budget-notrap") for n in (96, 97, 112, 113)] == [8, 7, 7, 6]
    occ = amd_occupancy(gfx942, vgpr=32, sgpr=90, block_size=256, sgpr_rule="budget")
    assert (occ.active, occ.limiter) == (7, "sgpr") and "use 80 SGPRs or fewer" in occ.next_step
    with pytest.raises(ValueError, match="sgpr_rule"):
        amd_occupancy(gfx942, vgpr=32, block_size=256, sgpr_rule="newest")


# llvm/test/CodeGen/AMDGPU/occupancy-levels.ll (LLVM main), the GFX950 `; Occupancy:` lines:
# kernels that clobber v0..v(N-1) with "amdgpu-flat-work-group-size"="1,32" ...
GFX950_VGPR_CASES = [(24, 8), (32, 8), (64, 8), (72, 7), (80, 6), (84, 5), (88, 5), (96, 5), (100, 4), (112, 4),
                     (128, 4), (144, 3), (168, 3), (200, 2), (256, 2)]
# ... and kernels with 8,252 bytes of LDS and "amdgpu-flat-work-group-size"="1,N".
GFX950_LDS_CASES = [(32, 5), (64, 5), (96, 8), (128, 8), (192, 8), (256, 8), (512, 8), (1024, 8)]


@pytest.mark.parametrize("vgpr, expected", GFX950_VGPR_CASES)
def test_llvm_occupancy_levels_vgpr_gfx950(vgpr, expected):
    assert amd_compiler_occupancy(get_arch("gfx950"), vgpr=vgpr, flat_workgroup_size=(1, 32)) == expected


@pytest.mark.parametrize("max_size, expected", GFX950_LDS_CASES)
def test_llvm_occupancy_levels_lds_gfx950(max_size, expected):
    gfx950 = get_arch("gfx950")
    assert amd_compiler_occupancy(gfx950, vgpr=1, lds_bytes=8252, flat_workgroup_size=(1, max_size)) == expected


def test_llvm_occupancy_levels_sgpr_gfx950():
    # s(N-1) clobbered; NumSgprs adds the 6 VCC/FLAT_SCRATCH/XNACK SGPRs of gfx940+ (architected flat
    # scratch): 80 -> 86, 88 -> 94, 100 -> 106, 101 -> 107. GFX950 and GFX950TRAP lines.
    gfx950 = get_arch("gfx950")
    got = [amd_compiler_occupancy(gfx950, vgpr=1, sgpr=n + 6, flat_workgroup_size=(1, 32), sgpr_rule=rule)
           for rule in ("budget-notrap", "budget") for n in (80, 88, 100, 101)]
    assert got == [8, 8, 7, 7, 7, 7, 6, 6]


def test_compiler_occupancy_is_the_best_over_the_size_range():
    gfx942 = get_arch("gfx942")
    # 20,000 bytes of LDS: 256-thread groups reach 3 waves per SIMD, 1024-thread groups 8 (2 groups = 32
    # waves), and the default range 1..1024 reports the best.
    assert amd_compiler_occupancy(gfx942, vgpr=32, lds_bytes=20000, flat_workgroup_size=(256, 256)) == 3
    assert amd_compiler_occupancy(gfx942, vgpr=32, lds_bytes=20000, flat_workgroup_size=(1, 256)) == 3
    assert amd_compiler_occupancy(gfx942, vgpr=32, lds_bytes=20000) == 8
    with pytest.raises(ValueError, match="flat_workgroup_size"):
        amd_compiler_occupancy(gfx942, vgpr=32, flat_workgroup_size=(512, 256))


def test_compiler_and_launch_agree_for_an_exact_size():
    for arch in ("gfx90a", "gfx942", "gfx950"):
        spec = get_arch(arch)
        for block in (64, 128, 192, 256, 320, 448, 512, 1024):
            for vgpr in (8, 40, 96, 200):
                for lds in (0, 3000, 20000, 40000):
                    occ = amd_occupancy(spec, vgpr=vgpr, lds_bytes=lds, block_size=block)
                    assert occ.active == amd_compiler_occupancy(spec, vgpr=vgpr, lds_bytes=lds,
                                                                flat_workgroup_size=(block, block))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(vgpr=257, block_size=64), "256 architectural"),
        (dict(vgpr=32, agpr=257, block_size=64), "256 AGPRs"),
        (dict(vgpr=32, lds_bytes=65537, block_size=64), "65536 bytes of LDS"),
        (dict(vgpr=32, block_size=1025), "1..1024"),
        (dict(vgpr=32, agpr=8, accum_offset=30, block_size=64), "multiple of 4"),
        (dict(vgpr=-1, block_size=64), ">= 0"),
    ],
)
def test_amd_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        amd_occupancy(get_arch("gfx942"), **kwargs)
    with pytest.raises(ValueError, match="amd"):
        amd_occupancy(get_arch("sm_90"), vgpr=32, block_size=64)


# ------------------------------------------------------------------------------------------------- CLI


@pytest.fixture()
def run_cli():
    """Invoke `kpilot arch ...` through kernelpilot.cli.main's group, as main() would."""
    from kernelpilot.cli.arch import arch
    from kernelpilot.cli.main import cli

    group = click.Group(commands={"arch": arch}) if "arch" not in cli.commands else cli
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(group, list(args))

    return run


def test_cli_list(run_cli):
    res = run_cli("arch", "list")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[:4] == ["key", "name", "arch", "vendor"]
    assert len(lines) == 2 + len(PRODUCTS)
    h200 = next(l for l in lines if l.startswith("h200 "))
    assert "sm_90" in h200 and "132" in h200 and "4.8" in h200 and "989.5" in h200


def test_cli_list_json(run_cli):
    res = run_cli("arch", "list", "--json")
    assert res.exit_code == 0
    doc = json.loads(res.output)
    assert doc["schema"] == "kernelpilot.arch/1"
    rows = {r["key"]: r for r in doc["gpus"]}
    assert list(rows) == PRODUCTS
    assert rows["mi300x"] == {"key": "mi300x", "name": "AMD Instinct MI300X", "arch": "gfx942", "vendor": "amd",
                              "sm_count": 304, "memory_gb": 192, "memory_bandwidth_tbps": 5.3,
                              "l2_cache_mib": 32.0, "peak_bf16_tflops": 1307.4}


def test_cli_show_product(run_cli):
    res = run_cli("arch", "show", "H200")
    assert res.exit_code == 0
    assert "NVIDIA H200 SXM 141GB" in res.output and "max_warps_per_sm" in res.output
    assert "http" not in res.output
    res = run_cli("arch", "show", "h200", "--sources")
    assert res.exit_code == 0
    assert "sources:" in res.output and "https://www.nvidia.com/en-us/data-center/h200/" in res.output
    assert "dense: half the datasheet's 1,979 with sparsity" in res.output


def test_cli_show_json_has_value_and_source(run_cli):
    res = run_cli("arch", "show", "sm_90a", "--json")
    assert res.exit_code == 0
    doc = json.loads(res.output)
    assert doc["gpu"] is None
    assert (doc["arch"]["name"], doc["arch"]["target"]) == ("sm_90", "sm_90a")
    assert doc["arch"]["products"] == ["h100", "h200"]
    for fact in doc["arch"]["facts"].values():
        assert set(fact) >= {"value", "source"} and fact["source"]["title"] and fact["source"]["url"]
    doc = json.loads(run_cli("arch", "show", "mi300x", "--json").output)
    assert doc["gpu"]["facts"]["sm_count"]["value"] == 304
    assert doc["gpu"]["facts"]["infinity_cache_bytes"]["source"]["url"].startswith("https://www.amd.com/")
    assert doc["arch"]["facts"]["max_waves_per_simd"]["value"] == 8


def test_cli_unknown_name(run_cli):
    res = run_cli("arch", "show", "sm_75")
    assert res.exit_code != 0 and isinstance(res.exception, UnknownArchError)


def test_main_prints_one_line_for_an_unknown_arch(capsys, monkeypatch):
    """Through main(): one line on stderr and exit code 1 (needs cli/main.py's other groups importable)."""
    pytest.importorskip("kernelpilot.cli.isa")
    from kernelpilot.cli.main import main

    monkeypatch.delenv("KPILOT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as e:
        main(["arch", "show", "nosuchgpu"])
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown arch 'nosuchgpu'; known: sm_80")


def test_an_absurd_register_count_ends_at_once():
    # a corrupted file's count: the next-step search starts where the limits change, not at the count itself
    from kernelpilot.arch.occupancy import amd_occupancy

    occ = amd_occupancy(get_arch("gfx942"), vgpr=8, sgpr=10**12, block_size=256, sgpr_rule="budget")
    assert occ.active == 1 and occ.limiter == "sgpr" and "384 SGPRs or fewer" in occ.next_step
