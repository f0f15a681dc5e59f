#!/bin/sh
# Regenerates the fixtures in this folder from real tools (run from the repository root):
#   sh tests/data/nvidia/capture.sh
# Captured with nvcc/ptxas 13.0.88 and cuobjdump/nvdisasm 13.1.80 (Triton 3.9's wheel).
set -e
D=tests/data/nvidia
T=$(mktemp -d)
CUOBJDUMP=${CUOBJDUMP:-$(python -c "from kernelpilot.toolchain.find import find_tool as f; print(f('cuobjdump'))")}
NVDISASM=${NVDISASM:-$(python -c "from kernelpilot.toolchain.find import find_tool as f; print(f('nvdisasm'))")}
nvcc -cubin -arch=sm_90 -O3 -lineinfo -o $T/loop_reduce.sm_90.cubin examples/kernels/loop_reduce.cu
"$NVDISASM" -c -hex -gi $T/loop_reduce.sm_90.cubin > $D/loop_reduce.sm_90.nvdisasm.sass
"$CUOBJDUMP" -sass $T/loop_reduce.sm_90.cubin > $D/loop_reduce.sm_90.cuobjdump.sass
nvcc -cubin -arch=sm_90 -O3 -lineinfo -o $T/branches.sm_90.cubin $D/branches.cu
"$NVDISASM" -c -hex -gi $T/branches.sm_90.cubin > $D/branches.sm_90.nvdisasm.sass
"$CUOBJDUMP" -sass $T/branches.sm_90.cubin > $D/branches.sm_90.cuobjdump.sass
for A in sm_80 sm_90; do
  nvcc -cubin -arch=$A -O3 -lineinfo -Xptxas -v -o $T/device_fn.$A.cubin $D/device_fn.cu 2> $D/device_fn.$A.ptxas.txt
  "$CUOBJDUMP" -res-usage $T/device_fn.$A.cubin > $D/device_fn.$A.res_usage.txt
done
# cuobjdump -elf without the hex dumps of the constant banks (lines starting with 0x)
"$CUOBJDUMP" -elf $T/device_fn.sm_90.cubin | grep -v '^0x' > $D/device_fn.sm_90.elf.txt
nvcc -cubin -arch=sm_90 -O3 -Xptxas -v -maxrregcount=32 -o $T/spill.sm_90.cubin examples/kernels/spill.cu 2> $D/spill.sm_90.ptxas.txt
nvcc -cubin -arch=sm_100a -O3 -Xptxas -v -o $T/smem_heavy.sm_100a.cubin examples/kernels/smem_heavy.cu 2> $D/smem_heavy.sm_100a.ptxas.txt
"$CUOBJDUMP" -res-usage $T/smem_heavy.sm_100a.cubin > $D/smem_heavy.sm_100a.res_usage.txt
nvcc -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a -o $T/vector_add.fatbin examples/kernels/vector_add.cu
"$CUOBJDUMP" -sass $T/vector_add.fatbin > $D/vector_add.fatbin.cuobjdump.sass
"$CUOBJDUMP" -res-usage $T/vector_add.fatbin > $D/vector_add.fatbin.res_usage.txt
rm -rf $T
