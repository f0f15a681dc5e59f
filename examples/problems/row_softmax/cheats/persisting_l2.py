"""Cheat (GPU): inputs kept in the L2 through the flush. Each call sets aside as much of the L2 for persisting
accesses as the GPU allows (where it is not set aside already: setting it waits for the device) and marks the
current stream's accesses to the memory around its input as persisting (an access policy window, through the CUDA
driver); the softmax itself is computed correctly.

How it fools a naive harness: the harness makes the next call's inputs on that stream, where the caching allocator
hands out the memory this call's inputs had, so they are written as persisting lines; a flush that reads a buffer
twice the L2 does not evict persisting lines, so every timed call finds its inputs in the L2 and a memory-bound
kernel times faster than it runs from memory. Nothing of the harness's is replaced or touched.

Caught by: before each flush the harness asks the driver whether any L2 is set aside for persisting lines and,
where it is, sets the set-aside back to 0 and demotes them all, so that the flush evicts them as any other (and this
call pays for setting it again); the warning-level flag ``l2-persisting`` says so.
"""

import ctypes

import torch

_LIMIT_PERSISTING_L2 = 0x06              # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
_MAX_PERSISTING_L2 = 108                 # CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE
_MAX_WINDOW = 109                        # CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE
_STREAM_WINDOW = 1                       # CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW
_NORMAL, _STREAMING, _PERSISTING = 0, 1, 2


class _Window(ctypes.Structure):         # CUaccessPolicyWindow, inside the 64 bytes of CUstreamAttrValue
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int), ("pad", ctypes.c_char * 36)]


_cuda = ctypes.CDLL("libcuda.so.1")
_sizes: list[int] = []


def _device_attribute(attribute: int) -> int:
    value, device = ctypes.c_int(0), ctypes.c_int(0)
    _cuda.cuCtxGetDevice(ctypes.byref(device))
    _cuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, device)
    return value.value


def _set_aside() -> int:
    value = ctypes.c_size_t(0)
    _cuda.cuCtxGetLimit(ctypes.byref(value), _LIMIT_PERSISTING_L2)
    return value.value


def _persist_around(x: torch.Tensor) -> None:
    if not _sizes:
        _sizes.extend((_device_attribute(_MAX_PERSISTING_L2), _device_attribute(_MAX_WINDOW)))
    carve_out, most = _sizes
    if _set_aside() < carve_out:
        _cuda.cuCtxSetLimit(_LIMIT_PERSISTING_L2, ctypes.c_size_t(carve_out))
    size = min(most, max(carve_out, 4 * x.numel() * x.element_size()))
    base = max(x.data_ptr() - size // 2, 0) & ~0xFFF
    window = _Window(base, size, min(1.0, carve_out / size), _PERSISTING, _STREAMING)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    _cuda.cuStreamSetAttribute(stream, _STREAM_WINDOW, ctypes.byref(window))


def softmax(x: torch.Tensor) -> torch.Tensor:
    if not torch.cuda.is_current_stream_capturing():   # a capture would fail on the driver calls
        _persist_around(x)
    y = x.float()
    e = (y - y.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
