// device_fn.cu: fixture source for tests/test_sass.py (see README.md for the commands).
// Several kernels in one file: a non-inlined device function with a local array (ptxas reports it as
// "Function properties" without "Compiling entry function"), two template instantiations using shared
// memory and a barrier, and a kernel with __launch_bounds__(128, 4) (EIATTR_MAX_THREADS in the cubin).
__device__ __noinline__ float helper(float* p, int i) { float t[16]; for (int k=0;k<16;k++) t[k]=p[k*i]; return t[i&15]; }
__global__ void k1(float* p, int n) { p[threadIdx.x] = helper(p, n); }
template<int N> __global__ void k2(float* p) { __shared__ float s[N]; s[threadIdx.x]=p[threadIdx.x]; __syncthreads(); p[threadIdx.x]=s[N-1-threadIdx.x]; }
template __global__ void k2<128>(float*);
template __global__ void k2<256>(float*);
__global__ void __launch_bounds__(128, 4) k3(float* p) { p[threadIdx.x] *= 2; }
