#!/usr/bin/env bash
# `make demo`: analyze the example kernels for an NVIDIA H100/H200 (sm_90) and an AMD MI300X (gfx942).
# An example whose compiler is missing is skipped, not failed; the end says exactly what was skipped and the
# one command that installs it. Any other failure fails the demo.
# Usage: scripts/demo.sh PATH/TO/kpilot
set -uo pipefail
kpilot="$1"
skipped=()
failed=()

run() {            # run TITLE ARGS...: one example
    local title="$1"; shift
    echo "== $title =="
    local err
    err="$(mktemp)"
    if "$kpilot" "$@" 2> >(tee "$err" >&2); then
        :
    elif grep -q "not found; install" "$err"; then
        skipped+=("$title: $(grep -m1 "not found; install" "$err" | sed 's/^error: //')")
    else
        failed+=("$title: kpilot $*")
    fi
    rm -f "$err"
    echo
}

run "CUDA C++ for an NVIDIA H100/H200 (sm_90): vectorized loads" \
    isa diff examples/kernels/vector_add.cu examples/kernels/vector_add_vec4.cu --arch sm_90
run "Triton kernel for an NVIDIA H100/H200 (sm_90)" \
    isa analyze examples/kernels/softmax_triton.py:softmax_kernel --arch sm_90
run "The same Triton kernel for an AMD MI300X (gfx942)" \
    isa analyze examples/kernels/softmax_triton.py:softmax_kernel --arch gfx942
run "HIP wave argmax: shuffles through LDS (ds_bpermute)" \
    isa analyze examples/kernels/wave_argmax_bpermute.hip --arch gfx942
run "HIP wave argmax: ds_bpermute against DPP" \
    isa diff examples/kernels/wave_argmax_bpermute.hip examples/kernels/wave_argmax_dpp.hip --arch gfx942
run "HIP row sums with DPP: what each lane holds (a float through an int-only builtin, and the right one)" \
    isa lanes examples/kernels/row_sum_dpp_converted.hip --arch gfx942

if [ ${#skipped[@]} -gt 0 ]; then
    echo "Skipped (a compiler is missing):"
    printf '  %s\n' "${skipped[@]}"
    echo "Run \`make setup\` as root on Debian or Ubuntu, or \`kpilot doctor\` for each tool's install command."
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "Failed:"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
echo "demo: $(( 6 - ${#skipped[@]} )) of 6 examples analyzed"
