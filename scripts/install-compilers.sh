#!/usr/bin/env bash
# The system compilers kernelpilot uses for HIP C++ and AMD code objects: clang 17 or newer with the HIP headers,
# and LLVM's llvm-objdump, llvm-readelf and ld.lld (Debian's and Ubuntu's clang-19, llvm-19, lld-19 and
# libamdhip64-dev; ROCm's own LLVM serves as well). NVIDIA's tools come from PyPI (the `cuda` extra) and Triton.
#
# As root on Debian or Ubuntu the missing packages are installed with apt-get. Anywhere else nothing is
# installed: the script says what is missing and the one command that installs it, and exits 0 so that the
# rest of the setup goes on (`make demo` then skips only the AMD examples and says so).
set -uo pipefail

have_any() {       # have_any NAME...: one of the names is on PATH, in any LLVM version kernelpilot accepts
    local n v
    for n in "$@"; do
        for v in 21 20 19 18 17; do command -v "$n-$v" >/dev/null 2>&1 && return 0; done
    done
    return 1
}

rocm="${ROCM_PATH:-/opt/rocm}"
if [ -x "$rocm/llvm/bin/clang++" ] && [ -d "$rocm/include/hip" ]; then
    echo "compilers: ROCm at $rocm"
    exit 0
fi

need=()
have_any clang++ || need+=(clang-19)
have_any llvm-objdump || need+=(llvm-19)
have_any ld.lld || need+=(lld-19)
[ -f /usr/include/hip/hip_runtime.h ] || need+=(libamdhip64-dev)
if [ ${#need[@]} -eq 0 ]; then
    echo "compilers: clang, LLVM, lld and the HIP headers are installed"
    exit 0
fi

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "compilers: installing ${need[*]} with apt-get"
    if apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"; then
        exit 0
    fi
    echo "compilers: apt-get could not install ${need[*]}" >&2
fi
if command -v apt-get >/dev/null 2>&1; then
    fix="sudo apt-get install ${need[*]}"
else
    fix="install clang 17 or newer with the HIP headers and LLVM 17 or newer (or ROCm), then run make demo again"
fi
echo "compilers: missing ${need[*]} (HIP C++ and AMD code objects). To install: $fix" >&2
exit 0
