"""Timing that a careful engineer would do by hand, and one typed result.

Every sample: new inputs made for it alone, just before it (untimed), L2 flushed by reading a buffer twice its
size (which writes back whatever the cache held dirty and leaves it holding clean lines, as after Nsight
Compute's cache flush), then CUDA events recorded on the current stream around the call, and a device-wide
synchronize before the next sample. Warm-up first; then samples, a batch at a time, until the median is stable
(it moves by less than ``rel_tol`` when a batch is added) or the time budget or ``max_n`` is reached. Work the
candidate puts on other streams is not inside these events: the worker's guard call finds it (``side-stream``
flag).

The samplers run only in worker processes (they import torch); ``Timing`` is plain data on both sides.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

__all__ = ["TimingOptions", "Timing", "summarize", "measure", "gpu_sampler", "graph_sampler", "cpu_sampler",
           "keep_busy", "l2_flush_buffer", "l2_flusher", "PersistingL2", "TimingTampered"]


@dataclass(frozen=True)
class TimingOptions:
    warmup: int = 3                 # at least this many untimed calls ...
    warmup_s: float = 0.05          # ... and at least this long
    min_n: int = 20
    max_n: int = 2000
    budget_s: float = 3.0           # wall-clock budget for the timed samples
    batch: int = 10
    rel_tol: float = 0.005          # stop when the median moves by less than this fraction
    flush_l2: bool = True
    flush_mode: str = "read"        # "read": leaves L2 clean; "write": zeroes the buffer (leaves L2 dirty)

    def __post_init__(self) -> None:
        if self.min_n < 3 or self.max_n < self.min_n or self.batch < 1 or self.budget_s <= 0 or self.rel_tol <= 0:
            raise ValueError(f"invalid timing options: {self}")
        if self.flush_mode not in ("read", "write"):
            raise ValueError(f"flush_mode must be 'read' or 'write', not {self.flush_mode!r}")


@dataclass
class Timing:
    median_us: float
    iqr_us: float
    min_us: float
    max_us: float
    mean_us: float
    n: int
    method: str
    converged: bool
    samples_us: list[float] = field(default_factory=list, repr=False)
    untimed_tail_us: float | None = None    # GPU work still running after the timed stream's end (side streams)
    host_median_us: float | None = None     # host time of one call (launch overhead), not in median_us
    prepare_s: float | None = None          # seconds spent generating inputs (untimed)

    def to_json(self, *, samples: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not samples:
            d.pop("samples_us")
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Timing:
        """A timing read back from ``to_json`` (another process's, or with a baseline's ``speedup`` beside it):
        keys it does not have are dropped; a missing one raises TypeError."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def summarize(samples: list[float], method: str, converged: bool) -> Timing:
    s = sorted(samples)
    q = statistics.quantiles(s, n=4, method="inclusive") if len(s) >= 2 else [s[0]] * 3
    return Timing(
        median_us=round(statistics.median(s), 4),
        iqr_us=round(q[2] - q[0], 4),
        min_us=round(s[0], 4),
        max_us=round(s[-1], 4),
        mean_us=round(statistics.fmean(s), 4),
        n=len(s),
        method=method,
        converged=converged,
        samples_us=[round(x, 4) for x in samples],
    )


def measure(sample: Callable[[int], float], method: str, opts: TimingOptions, *,
            untimed: Callable[[], float] | None = None) -> Timing:
    """Warm up, then call ``sample(i)`` (returns one time in microseconds) in batches of ``opts.batch`` until
    the median is stable.

    ``untimed()`` (optional) says how many seconds the samples have spent so far outside their timers, e.g.
    making each call's new inputs: ``budget_s`` counts the warm-up and the timed calls, not that; the whole,
    preparation included, stops at four times the budget (slow input generators get fewer samples, never an
    endless run).
    """
    def warm() -> None:
        t0 = time.perf_counter()
        i = 0
        while i < opts.warmup or time.perf_counter() - t0 < opts.warmup_s:
            sample(-1 - i)
            i += 1
            if i >= 1000:
                break

    spent = untimed or (lambda: 0.0)
    samples: list[float] = []
    warm()
    start = time.perf_counter()
    outside = spent()
    converged = False
    prev_median = None
    while len(samples) < opts.max_n:
        for i in range(len(samples), min(len(samples) + opts.batch, opts.max_n)):
            samples.append(sample(i))
        med = statistics.median(samples)
        if len(samples) >= opts.min_n and prev_median is not None and med > 0:
            if abs(med - prev_median) / med < opts.rel_tol:
                converged = True
                break
        prev_median = med
        elapsed = time.perf_counter() - start
        if elapsed - (spent() - outside) > opts.budget_s and len(samples) >= opts.min_n:
            break
        if elapsed > 4 * opts.budget_s:
            break
    t = summarize(samples, method, converged)
    if untimed is not None:
        t.prepare_s = round(spent() - outside, 3)
    return t


def keep_busy(device: str, seconds: float, clock: dict[str, Any] | None = None) -> None:
    """Keep the GPU busy for about ``seconds`` (at most 50 ms) with a spin kernel and wait for it: after the
    host made a call's inputs for that long with the GPU idle, its clocks have dropped, and the next timed
    kernels would run slow."""
    import torch

    spin = _clocked(clock, "torch.cuda._sleep", getattr(torch.cuda, "_sleep", None))
    if spin is None or not device.startswith("cuda") or seconds <= 0:
        return
    spin(int(min(seconds, 0.05) * 1e6 * _SPIN_CYCLES_PER_US))
    _clocked(clock, "torch.cuda.synchronize", torch.cuda.synchronize)()


def l2_flush_buffer(device: str = "cuda"):
    """A buffer twice the L2 size (at least 64 MiB): passing over it evicts whatever the L2 held."""
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    size = max(2 * l2, 64 << 20)
    return torch.zeros(size // 4, dtype=torch.int32, device=device)


class TimingTampered(RuntimeError):
    """Something the timing relies on was changed while it ran (by the code it times)."""


# The driver's limit on the L2 set aside for persisting accesses (CUlimit CU_LIMIT_PERSISTING_L2_CACHE_SIZE).
_CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06


class PersistingL2:
    """L2 set aside for persisting lines, given back and its lines demoted before a flush.

    From sm_80 a process may set aside part of the L2 for persisting accesses (``cudaLimitPersistingL2CacheSize``)
    and mark a stream's accesses to a window of memory persisting (an access policy window, also kept by the
    kernels a CUDA graph captures). A flush's reads and writes do not evict persisting lines, and normal accesses
    use the set-aside part only where persisting lines leave it: code under test that marked the memory where each
    call's new inputs are made would find them in the L2, and a memory-bound kernel would time as if its inputs
    were cached. Called before each flush, this asks the driver (functions bound when it is made, before the
    candidate is imported) whether any L2 is set aside and, where it is, waits for the device, sets the set-aside
    to 0 (the default) and demotes every persisting line, so that the flush evicts them as any other. ``cleared``
    counts the flushes that had to; ``found`` those where the set-aside was not what the context had when this was
    made (before the candidate) or, after a clearing, 0 again: where a machine's contexts start with L2 set aside
    (an MPS server's default, say), the first clearing is not the candidate's doing. ``set_aside``: the largest
    set-aside found (bytes). A kernel's own use of persisting lines within one call is left as it is. Where there
    is no CUDA driver it does nothing."""

    def __init__(self, synchronize: Callable[[], None] | None = None) -> None:
        self.found = self.cleared = self.set_aside = 0
        self._synchronize = synchronize
        self._get = self._set = self._reset = None
        try:
            import ctypes

            lib = ctypes.CDLL("libcuda.so.1")
            get, set_, reset = lib.cuCtxGetLimit, lib.cuCtxSetLimit, lib.cuCtxResetPersistingL2Cache
        except (OSError, AttributeError):
            return
        get.argtypes, get.restype = (ctypes.POINTER(ctypes.c_size_t), ctypes.c_int), ctypes.c_int
        set_.argtypes, set_.restype = (ctypes.c_int, ctypes.c_size_t), ctypes.c_int
        reset.argtypes, reset.restype = (), ctypes.c_int
        self._value = ctypes.c_size_t(0)
        self._ref = ctypes.byref(self._value)
        self._get, self._set, self._reset = get, set_, reset
        self._expected = self._read()   # the context's own (0 where there is none yet)

    def _read(self) -> int:
        """The set-aside in bytes; 0 where there is no context."""
        self._value.value = 0
        return self._value.value if self._get(self._ref, _CU_LIMIT_PERSISTING_L2_CACHE_SIZE) == 0 else 0

    def __call__(self) -> None:
        if self._get is None:
            return
        value = self._read()
        if not value:
            return      # none set aside (or no context yet): no line can be persisting
        self.set_aside = max(self.set_aside, value)
        if self._synchronize is not None:
            self._synchronize()   # copies still in flight (a graph's new inputs) land before their lines are demoted
        self._set(_CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
        self._reset()
        self.cleared += 1
        self.found += value != self._expected
        self._expected = 0


def l2_flusher(device: str = "cuda", mode: str = "read", clock: dict[str, Any] | None = None) -> Callable[[], None]:
    """A function that empties the L2 of useful data before a timed call.

    ``read`` (default) reads the buffer: lines the last call left dirty are written back now, outside the
    timer, and the cache ends up holding clean lines that cost nothing to evict (Nsight Compute's flush
    leaves it clean too). ``write`` zeroes the buffer, as many harnesses do: the cache is left full of dirty
    lines that the timed kernel then pays to write back.

    The flush calls torch's own C functions as ``clock`` holds them (taken before the candidate was imported,
    and immutable where torch defines them), and before each pass it checks that the buffer still has the
    memory and layout it was made with: code under test that found the buffer (through the garbage collector)
    and shrank it, re-strided it or freed its storage would otherwise make the flush a no-op and time its
    calls from a warm L2. A changed buffer raises ``TimingTampered``. Lines held as persisting are demoted
    first (``PersistingL2``: ``clock``'s, else one made now), so that the pass evicts them too."""
    import torch

    held = lambda name, default: _clocked(clock, name, default)  # noqa: E731
    demote = held("cuda.persisting_l2", None) or PersistingL2(held("torch.cuda.synchronize", torch.cuda.synchronize))
    amax = held("torch._C._VariableFunctions.amax", torch._C._VariableFunctions.amax)
    zero = held("torch._C.TensorBase.zero_", torch._C.TensorBase.zero_)
    parts = [held(f"torch._C.TensorBase.{n}", getattr(torch._C.TensorBase, n))
             for n in ("data_ptr", "size", "stride", "storage_offset")]
    buf = l2_flush_buffer(device)
    layout = tuple(f(buf) for f in parts)
    out = torch.empty((), dtype=torch.int32, device=device)

    def flush() -> None:
        if tuple(f(buf) for f in parts) != layout:
            raise TimingTampered("the L2 flush buffer was changed while the calls were timed (its memory, size or "
                                 "strides): the code under test reached into the harness")
        demote()
        if mode == "write":
            zero(buf)
        else:
            amax(buf, dim=0, out=out)

    return flush


# torch.cuda._sleep counts GPU cycles; about 2 GHz on current data-center GPUs. Only a lead time: exactness
# does not matter.
_SPIN_CYCLES_PER_US = 2000


@dataclass
class Tails:
    """Gaps (us) between the end of the timed stream's work and the moment the whole device was idle."""

    baseline: list[float] = field(default_factory=list)   # control rounds: only the timed stream's own work
    samples: list[float] = field(default_factory=list)    # after each timed call

    def excess_us(self) -> float | None:
        """How much longer than the idle round trip the device stayed busy after the timed work (median)."""
        if not self.baseline or not self.samples:
            return None
        return statistics.median(self.samples) - statistics.median(self.baseline)


# The host's wake-up after a device-wide synchronize jitters by up to about 13 us on a busy H200 host, however
# long the kernel: an honest candidate's median excess was seen at 10 to 13.5 us there. Work hidden on another
# stream shows as an excess about as long as the work itself.
SIDE_STREAM_ERROR_US = 15.0
SIDE_STREAM_WARNING_US = 10.0


def side_stream_level(excess_us: float, median_us: float) -> str | None:
    """How to flag a median excess (``Tails.excess_us``) after calls timed at ``median_us``: "error" when the
    device stayed busy longer than the timed work itself and beyond the host's jitter (work hidden from the
    timer), "warning" when it is over 10 us and a fifth of the time (hidden work or a late host: the two
    cannot be told apart), else None."""
    if excess_us > max(SIDE_STREAM_ERROR_US, median_us):
        return "error"
    if excess_us > max(SIDE_STREAM_WARNING_US, 0.2 * median_us):
        return "warning"
    return None


def _clocked(clock: dict[str, Any] | None, name: str, default):
    """A timing function as captured before the candidate was imported (``clock``), else the current one."""
    return (clock or {}).get(name) or default


def _event_tools(clock: dict[str, Any] | None):
    """The event constructor, ``record``, device-wide ``synchronize`` and ``elapsed_time`` to time with: those
    captured before the candidate was imported where ``clock`` has them."""
    import torch

    return (
        _clocked(clock, "torch.cuda.Event", torch.cuda.Event),
        _clocked(clock, "torch.cuda.Event.record", torch.cuda.Event.record),
        _clocked(clock, "torch.cuda.synchronize", torch.cuda.synchronize),
        _clocked(clock, "torch.cuda.Event.elapsed_time", torch.cuda.Event.elapsed_time),
    )


class _Lead:
    """The host takes time to launch the timed work (Python, Triton's launcher, a graph's replay), and more when
    its CPU is busy. So that the events time the GPU's work and not the host's, the GPU is kept busy (a spin
    kernel, recorded before the start event) while the host records the start event and launches: the spin
    lasts about twice the host time the last calls took."""

    def __init__(self, clock: dict[str, Any] | None = None) -> None:
        import torch

        self.spin = _clocked(clock, "torch.cuda._sleep", getattr(torch.cuda, "_sleep", None))
        self.host_us: list[float] = []

    def __call__(self) -> float:
        """Spin for the lead (us, 0 before the first call was timed); returns it."""
        if self.spin is None or not self.host_us:
            return 0.0
        lead = min(10_000.0, 2.0 * statistics.median(self.host_us[-16:]) + 20.0)
        self.spin(int(lead * _SPIN_CYCLES_PER_US))
        return lead


def gpu_sampler(call: Callable[[], Any], *, prepare: Callable[[int], None] | None = None,
                after: Callable[[int, Any], None] | None = None, flush_l2: bool = True, flush_mode: str = "read",
                device: str = "cuda", clock: dict[str, Any] | None = None) -> Callable[[int], float]:
    """One sample: ``prepare(i)``, flush L2, events around ``call()``, device-wide synchronize,
    then ``after(i, output)`` (untimed, e.g. keep the output for checking)."""
    flush = l2_flusher(device, flush_mode, clock) if flush_l2 else None
    event, record, synchronize, elapsed = _event_tools(clock)
    start = event(enable_timing=True)
    end = event(enable_timing=True)

    post = event(enable_timing=True)
    sample_tails = Tails()
    lead_in = _Lead(clock)
    spin, host_us = lead_in.spin, lead_in.host_us
    clock_now = _clocked(clock, "time.perf_counter", time.perf_counter)

    def tail() -> float:
        # After the device-wide synchronize returns, mark the timed stream again: the gap from the end event
        # is the host's round trip, plus any work that was still running elsewhere (another stream or thread).
        record(post)
        synchronize()
        return elapsed(end, post) * 1000.0

    def control(wait_us: float) -> float:
        # The same round trip with nothing but the timed stream's own spin pending, the host waiting about as
        # long as it waited for the call (how long it waits changes how fast it wakes up).
        if spin is not None and wait_us > 0:
            spin(int(wait_us * _SPIN_CYCLES_PER_US))
        record(end)
        synchronize()
        return tail()

    def sample(i: int) -> float:
        if prepare is not None:
            prepare(i)
        if flush is not None:
            flush()
        lead = lead_in()
        record(start)
        h = clock_now()
        out = call()
        host = (clock_now() - h) * 1e6
        host_us.append(host)
        record(end)
        synchronize()
        t = elapsed(start, end) * 1000.0
        if i >= 0:
            sample_tails.samples.append(tail())
            sample_tails.baseline.append(control(max(lead - host, 0.0) + t))
        if after is not None:
            after(i, out)
        return t

    sample.tails = sample_tails  # type: ignore[attr-defined]
    sample.host_us = host_us  # type: ignore[attr-defined]
    return sample


def graph_sampler(graph, *, prepare: Callable[[int], None] | None = None,
                  after: Callable[[int], None] | None = None, flush_l2: bool = True, flush_mode: str = "read",
                  device: str = "cuda", clock: dict[str, Any] | None = None) -> Callable[[int], float]:
    """Like ``gpu_sampler`` but replays a captured CUDA graph (launch overhead removed; the GPU kept busy
    while the host calls the replay, as there). A ``torch.cuda.CUDAGraph`` is replayed with its ``replay`` as
    ``clock`` holds it; anything else with a ``replay`` method, with that."""
    import torch

    flush = l2_flusher(device, flush_mode, clock) if flush_l2 else None
    event, record, synchronize, elapsed = _event_tools(clock)
    held = _clocked(clock, "torch.cuda.CUDAGraph.replay", torch.cuda.CUDAGraph.replay)
    replay = (lambda: held(graph)) if isinstance(graph, torch.cuda.CUDAGraph) else graph.replay
    start = event(enable_timing=True)
    end = event(enable_timing=True)
    lead_in = _Lead(clock)
    clock_now = _clocked(clock, "time.perf_counter", time.perf_counter)

    def sample(i: int) -> float:
        if prepare is not None:
            prepare(i)
        if flush is not None:
            flush()
        lead_in()
        record(start)
        h = clock_now()
        replay()
        lead_in.host_us.append((clock_now() - h) * 1e6)
        record(end)
        synchronize()
        if after is not None:
            after(i)
        return elapsed(start, end) * 1000.0

    sample.host_us = lead_in.host_us  # type: ignore[attr-defined]
    return sample


def cpu_sampler(call: Callable[[], Any], *, prepare: Callable[[int], None] | None = None,
                after: Callable[[int, Any], None] | None = None,
                clock: dict[str, Any] | None = None) -> Callable[[int], float]:
    """Wall-clock time of one call on the CPU (for --device cpu; these are CPU times)."""
    clock = _clocked(clock, "time.perf_counter", time.perf_counter)

    def sample(i: int) -> float:
        if prepare is not None:
            prepare(i)
        t = clock()
        out = call()
        dt = clock() - t
        if after is not None:
            after(i, out)
        return dt * 1e6

    return sample
