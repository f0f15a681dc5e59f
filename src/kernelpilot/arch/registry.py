"""The GPU facts registry: architectures and products from ``data/gpus.toml``, each fact with its source.

    get_arch("sm_90a")   -> ArchSpec(name="sm_90", target="sm_90a", vendor="nvidia", ...)
    get_arch("H200")     -> the sm_90 ArchSpec (a product name resolves to its ISA arch)
    get_gpu("mi300x")    -> GPUSpec(name="AMD Instinct MI300X", arch="gfx942", ...)
    spec.fact("max_warps_per_sm") -> Fact(value=64, source=Source(title, url), note)
    spec.max_warps_per_sm         -> 64 (every fact is also a plain attribute)

Names are case-insensitive. ISA names may carry NVIDIA's arch-specific suffix (``sm_90a``, ``sm_100a``,
``sm_100f``) or AMD target features (``gfx942:sramecc+:xnack-``): ``.name`` drops them, ``.target`` keeps them
for the compiler. Unknown names raise ``UnknownArchError`` listing ``known_names()``.
The data file is read once per process (``tomllib`` through ``importlib.resources``) and validated: every
fact cites a source from the file's ``[sources]`` table and every arch/product has its vendor's facts.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal, Mapping

from kernelpilot.errors import UnknownArchError, UsageError

ARCH_SCHEMA = "kernelpilot.arch/1"   # `kpilot arch --json`

__all__ = [
    "Source",
    "Fact",
    "GPUSpec",
    "ArchSpec",
    "get_arch",
    "get_gpu",
    "resolve",
    "list_archs",
    "list_gpus",
    "known_names",
    "NVIDIA_ARCH_FACTS",
    "AMD_ARCH_FACTS",
    "GPU_FACTS",
]

Vendor = Literal["nvidia", "amd"]

# The facts every arch of a vendor must have (occupancy needs them all), and every product.
NVIDIA_ARCH_FACTS = (
    "warp_size", "registers_per_sm", "max_registers_per_block", "max_registers_per_thread",
    "register_alloc_unit", "max_threads_per_block", "max_threads_per_sm", "max_warps_per_sm",
    "max_blocks_per_sm", "schedulers_per_sm", "shared_memory_per_sm_bytes", "shared_memory_per_block_bytes",
    "shared_memory_per_block_optin_bytes", "shared_alloc_unit_bytes", "reserved_shared_per_block_bytes",
    "shared_carveouts_kb",
)
AMD_ARCH_FACTS = (
    "warp_size", "simds_per_cu", "max_waves_per_simd", "vgprs_per_simd_lane", "max_vgprs_per_wave",
    "max_arch_vgprs", "max_agprs", "vgpr_alloc_granule", "accum_offset_granule", "sgprs_per_simd",
    "max_sgprs_per_wave", "sgpr_alloc_granule", "max_threads_per_block", "lds_per_cu_bytes",
    "max_lds_per_workgroup_bytes", "max_workgroups_per_cu",
)
GPU_FACTS = (
    "sm_count", "l2_cache_bytes", "memory_gb", "memory_bandwidth_tbps", "peak_fp32_tflops",
    "peak_fp16_tflops", "peak_bf16_tflops", "peak_fp8_tflops", "boost_clock_mhz",
)
# Facts a product may lack entirely (no Infinity Cache on NVIDIA).
OPTIONAL_GPU_FACTS = ("infinity_cache_bytes",)

_NV_ISA = re.compile(r"^sm_?(\d{2,3})([af]?)$")
_AMD_ISA = re.compile(r"^(gfx[0-9a-f]{3,4})((?::[a-z0-9-]+[+-])*)$")


@dataclass(frozen=True)
class Source:
    """A document a fact comes from: ``key`` in the data file, its title, and where to read it."""

    key: str
    title: str
    url: str

    def to_json(self) -> dict[str, str]:
        return {"title": self.title, "url": self.url}


@dataclass(frozen=True)
class Fact:
    """One value and the document that states it. ``value`` is None where the thing does not exist
    (A100's FP8 peak); ``note`` says how the value was derived or where sources disagree."""

    value: Any
    source: Source
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "source": self.source.to_json()}
        if self.note:
            out["note"] = self.note
        return out


class _FactAttrs:
    """Mixin: every fact is readable as a plain attribute (``spec.max_warps_per_sm``)."""

    facts: Mapping[str, Fact]

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails; guard dunders and the facts field itself (unpickling).
        if name.startswith("__") or name == "facts":
            raise AttributeError(name)
        try:
            return self.facts[name].value
        except KeyError:
            raise AttributeError(f"{type(self).__name__} {getattr(self, 'name', '?')!r} has no fact {name!r}") from None

    def fact(self, name: str) -> Fact:
        """The fact ``name`` with its source; KeyError names the facts there are."""
        try:
            return self.facts[name]
        except KeyError:
            raise KeyError(f"no fact {name!r}; facts: {', '.join(self.facts)}") from None


@dataclass(frozen=True)
class GPUSpec(_FactAttrs):
    """One GPU product (for rooflines: bandwidth and peaks). ``key`` is its id in the data file."""

    key: str
    name: str
    arch: str
    vendor: Vendor
    aliases: tuple[str, ...]
    facts: Mapping[str, Fact] = field(repr=False, compare=False)

    def __reduce__(self):
        # Specs hold read-only mappings, which do not pickle; a spec is fully named by its key.
        return (get_gpu, (self.key,))

    def summary(self) -> dict[str, Any]:
        """The headline facts (one row of `kpilot arch list`)."""
        l2 = self.facts["l2_cache_bytes"].value if "l2_cache_bytes" in self.facts else None
        return {"key": self.key, "name": self.name, "arch": self.arch, "vendor": self.vendor,
                "sm_count": self.sm_count, "memory_gb": self.memory_gb,
                "memory_bandwidth_tbps": self.memory_bandwidth_tbps,
                "l2_cache_mib": None if l2 is None else round(l2 / 2**20, 1), "peak_bf16_tflops": self.peak_bf16_tflops}

    def to_json(self, *, sources: bool = True) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "arch": self.arch,
            "vendor": self.vendor,
            "aliases": list(self.aliases),
            "facts": {k: (f.to_json() if sources else f.value) for k, f in self.facts.items()},
        }


@dataclass(frozen=True)
class ArchSpec(_FactAttrs):
    """One ISA architecture: ``name`` normalized (``sm_90``, ``gfx942``), ``target`` as the compiler should get
    it (``sm_90a`` when the user asked for it), the occupancy facts, and the products built on it."""

    name: str
    target: str
    vendor: Vendor
    family: str
    facts: Mapping[str, Fact] = field(repr=False, compare=False)
    products: tuple[GPUSpec, ...] = field(default=(), repr=False, compare=False)

    def __reduce__(self):
        return (get_arch, (self.target,))

    def to_json(self, *, sources: bool = True) -> dict[str, Any]:
        return {
            "name": self.name,
            "target": self.target,
            "vendor": self.vendor,
            "family": self.family,
            "facts": {k: (f.to_json() if sources else f.value) for k, f in self.facts.items()},
            "products": [p.key for p in self.products],
        }


@dataclass(frozen=True)
class _Registry:
    archs: Mapping[str, ArchSpec]
    gpus: Mapping[str, GPUSpec]
    aliases: Mapping[str, str]  # normalized product alias -> gpu key


def _norm_product(name: str) -> str:
    s = name.strip().lower()
    for prefix in ("nvidia", "amd", "instinct"):
        s = s.strip()
        if s.startswith(prefix):
            s = s[len(prefix):]
    return re.sub(r"[^a-z0-9]", "", s)


def _parse_facts(where: str, table: Mapping[str, Any], sources: Mapping[str, Source],
                 skip: set[str]) -> dict[str, Fact]:
    facts: dict[str, Fact] = {}
    for key, raw in table.items():
        if key in skip:
            continue
        if not isinstance(raw, dict) or "source" not in raw:
            raise ValueError(f"gpus.toml: {where}.{key} must be {{ value = ..., source = \"KEY\" }}")
        src = sources.get(raw["source"])
        if src is None:
            raise ValueError(f"gpus.toml: {where}.{key} cites unknown source {raw['source']!r}")
        if "value" not in raw and not raw.get("note"):
            raise ValueError(f"gpus.toml: {where}.{key} has no value and no note saying why")
        value = raw.get("value")
        if isinstance(value, list):
            value = tuple(value)
        facts[key] = Fact(value=value, source=src, note=raw.get("note"))
    return facts


def _require(where: str, facts: Mapping[str, Fact], names: tuple[str, ...]) -> None:
    missing = [n for n in names if n not in facts]
    if missing:
        raise ValueError(f"gpus.toml: {where} lacks {', '.join(missing)}")


def _build(doc: Mapping[str, Any]) -> _Registry:
    sources = {k: Source(k, v["title"], v["url"]) for k, v in doc["sources"].items()}
    gpus: dict[str, GPUSpec] = {}
    aliases: dict[str, str] = {}
    for key, raw in doc["gpu"].items():
        arch_raw = doc["arch"].get(raw["arch"])
        if arch_raw is None:
            raise ValueError(f"gpus.toml: gpu.{key} names unknown arch {raw['arch']!r}")
        facts = _parse_facts(f"gpu.{key}", raw, sources, {"name", "arch", "aliases"})
        _require(f"gpu.{key}", facts, GPU_FACTS)
        gpu = GPUSpec(key=key, name=raw["name"], arch=raw["arch"], vendor=arch_raw["vendor"],
                      aliases=tuple(raw.get("aliases", ())), facts=MappingProxyType(facts))
        gpus[key] = gpu
        for alias in (key, raw["name"], *gpu.aliases):
            n = _norm_product(alias)
            if aliases.get(n, key) != key:
                raise ValueError(f"gpus.toml: alias {alias!r} names two products")
            aliases[n] = key
    archs: dict[str, ArchSpec] = {}
    for name, raw in doc["arch"].items():
        vendor = raw["vendor"]
        if vendor not in ("nvidia", "amd"):
            raise ValueError(f"gpus.toml: arch.{name}.vendor must be 'nvidia' or 'amd'")
        facts = _parse_facts(f"arch.{name}", raw, sources, {"vendor", "family"})
        _require(f"arch.{name}", facts, NVIDIA_ARCH_FACTS if vendor == "nvidia" else AMD_ARCH_FACTS)
        products = tuple(g for g in gpus.values() if g.arch == name)
        archs[name] = ArchSpec(name=name, target=name, vendor=vendor, family=raw["family"],
                               facts=MappingProxyType(facts), products=products)
    return _Registry(MappingProxyType(archs), MappingProxyType(gpus), MappingProxyType(aliases))


@lru_cache(maxsize=1)
def _registry() -> _Registry:
    text = resources.files("kernelpilot.arch").joinpath("data", "gpus.toml").read_text(encoding="utf-8")
    return _build(tomllib.loads(text))


def _parse_isa(name: str) -> tuple[str, str] | None:
    """(normalized arch, compiler target) for an ISA name, or None if it does not look like one."""
    s = name.strip().lower()
    m = _NV_ISA.match(s)
    if m:
        return f"sm_{m.group(1)}", f"sm_{m.group(1)}{m.group(2)}"
    m = _AMD_ISA.match(s)
    if m:
        return m.group(1), s
    return None


def resolve(name: str) -> tuple[ArchSpec, GPUSpec | None]:
    """The arch a name means and, when the name is a product, that product.

    ISA names (``sm_90a``, ``gfx942``) give ``(arch, None)``; product names (``H200``) give
    ``(arch, gpu)``. Raises UnknownArchError for anything else.
    """
    reg = _registry()
    isa = _parse_isa(name)
    if isa is not None:
        base, target = isa
        spec = reg.archs.get(base)
        if spec is None:
            raise UnknownArchError(name, known_names())
        return (spec if target == base else dataclasses.replace(spec, target=target)), None
    key = reg.aliases.get(_norm_product(name))
    if key is None:
        raise UnknownArchError(name, known_names())
    gpu = reg.gpus[key]
    return reg.archs[gpu.arch], gpu


def get_arch(name: str) -> ArchSpec:
    """The ISA architecture for an ISA or product name (case-insensitive). Raises UnknownArchError."""
    return resolve(name)[0]


def get_gpu(name: str) -> GPUSpec:
    """The product for a product name, or for an ISA name that only one known product has.

    Raises UnknownArchError for unknown names and UsageError when an ISA name is shared by several
    products (sm_90: H100 and H200), listing them.
    """
    spec, gpu = resolve(name)
    if gpu is not None:
        return gpu
    if len(spec.products) == 1:
        return spec.products[0]
    names = ", ".join(p.key for p in spec.products) or "none"
    raise UsageError(f"{name!r} is an ISA arch, not one GPU; products with {spec.name}: {names}.")


def list_archs() -> list[ArchSpec]:
    """Every known ISA architecture, NVIDIA first, in data-file order."""
    return sorted(_registry().archs.values(), key=lambda a: a.vendor != "nvidia")


def list_gpus() -> list[GPUSpec]:
    """Every known product, in data-file order (NVIDIA, then AMD)."""
    return list(_registry().gpus.values())


def known_names() -> list[str]:
    """ISA names and product keys that ``get_arch`` accepts (aliases too, but not their spellings)."""
    reg = _registry()
    names = list(reg.archs)
    for g in reg.gpus.values():
        names.extend(a for a in g.aliases if a not in names)
    return names
