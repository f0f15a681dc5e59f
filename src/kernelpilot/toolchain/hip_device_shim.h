/* kernelpilot: inline stand-ins for the most used ROCm device-library entry points.
 *
 * WHEN IT IS USED
 *   Only when kernelpilot compiles HIP device code against HIP headers that come without ROCm's device
 *   libraries (Debian/Ubuntu's libamdhip64-dev: no amdgcn/bitcode folder, so clang runs with -nogpulib).
 *   kernelpilot then passes `-include <this file>`.  With a real ROCm the device libraries are linked
 *   instead and this file is not used.
 *
 * WHY
 *   The HIP headers implement threadIdx/blockIdx/blockDim/gridDim, __syncthreads and many math functions
 *   as calls into ROCm's device libraries (ockl, ocml, hip.bc).  Under -nogpulib those stay unresolved
 *   calls: the ISA shows s_swappc_b64, a stack and inflated register counts, nothing like the code a
 *   ROCm build gives.  The functions below are defined inline with the same semantics as ROCm's, so the
 *   ISA is the one ROCm would produce for them.
 *
 * RULE
 *   A function is defined here only when its definition is the library's own: the same operations as the
 *   ROCm device-library source (ROCm-Device-Libs, now llvm-project amd/device-libs; ockl workitem.cl,
 *   ocml *F.cl and *H.cl, hip/opencl awif.cl), so that once inlined it gives the IR and the ISA the library
 *   gives.  Left out, and so still reported as unresolved calls:
 *   - functions whose result depends on link-time controls this header cannot see:
 *     log, log10 (__oclc_unsafe_math_opt), and anything reading __oclc_finite_only_opt;
 *   - sqrt_f32, native_sqrt_f32, native_rsqrt_f32: the library is OpenCL, where clang marks the sqrt with
 *     !fpmath 3 ulp; the same builtin in HIP is correctly rounded (a different result and sequence);
 *   - native_log*: their library form changed meaning between releases;
 *   - everything without a short exact form (sin, cos, tan, pow, tanh, erf, ...), wave-level ockl
 *     (__ockl_wfany/wfall, dots, printf, ...);
 *   - all of the ocml part under -ffast-math, -ffinite-math-only, -fno-honor-nans, -funsafe-math-
 *     optimizations and the like (kernelpilot then defines __KPILOT_SHIM_NO_OCML): the kernel's copy of
 *     the code would be optimised with those flags (isnan folded to false, ...), the library's is not.
 *
 * HOW IT WAS CHECKED (clang 19, gfx942 and gfx90a, code object v5 and v4, with and without
 * -fgpu-flush-denormals-to-zero): a kernel per function compiled with this header against the same
 * kernel linked (-mlink-builtin-bitcode, as the ROCm driver does) with (a) Debian's rocm-device-libs
 * 5.2.3 ockl.bc/hip.bc/ocml.bc and (b) the current ocml sources of these functions compiled with the
 * library's build flags (OCL.cmake).  The ISA is identical, except rsqrt_f32 (same instructions, another
 * order) and, for v4, the same instructions scheduled differently.  Against 5.2.3's ocml.bc only the
 * transcendental ones differ (exp, exp2, log2, native_exp, exp_f16, exp/log_2f16): that old bitcode predates
 * LLVM giving llvm.exp2/log2 their accurate meaning, and current ocml (ROCm 6.x) is what is followed.
 *
 * WHAT IS DEFINED
 *   ockl (workitem.cl, both code-object ABIs; v5, clang 19's default, reads the hidden kernel
 *   arguments block_count/group_size/remainder/global_offset through __builtin_amdgcn_implicitarg_ptr();
 *   v4 reads the HSA dispatch packet through __builtin_amdgcn_dispatch_ptr()):
 *     __ockl_get_local_id  __ockl_get_group_id  __ockl_get_local_size  __ockl_get_num_groups
 *     __ockl_get_global_size  __ockl_get_global_id
 *   ockl integer helpers: __ockl_mul24_i32/u32  __ockl_mul_hi_i32/u32  __ockl_clz_u32
 *   hip.bc: __atomic_work_item_fence (__syncthreads, __threadfence*): a fence of the given order and scope
 *   ocml f32: fabs fmax fmin fma floor ceil trunc rint round copysign isnan isinf isfinite
 *             exp exp2 (the library is __builtin_expf/__builtin_exp2f: the accurate expansions, not a bare
 *             v_exp_f32), log2 and rsqrt (the library's denormal scaling, selected by the function's
 *             denormal mode exactly as the library's DAZ_OPT() does), native_sin, native_cos,
 *             native_exp (a bare v_exp_f32 of x*log2(e))
 *   ocml f16: fabs fmax fmin fma floor ceil trunc rint sqrt isnan isinf exp exp2 log log2 rsqrt
 *   ocml 2f16: fabs fma floor ceil trunc rint sqrt exp exp2 log log2 rsqrt
 *
 * The ABI version (500 for code object v5, 400 for v4) comes from __KPILOT_SHIM_ABI_VERSION, which
 * kernelpilot sets from -mcode-object-version (and checks against the .amdhsa_code_object_version clang
 * wrote).  Every definition is `inline` + always_inline, so nothing is emitted for functions a kernel
 * does not use.
 */
#ifndef KERNELPILOT_HIP_DEVICE_SHIM_H
#define KERNELPILOT_HIP_DEVICE_SHIM_H

#if defined(__HIP__) && defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGCN__)

#ifndef __KPILOT_SHIM_ABI_VERSION
#define __KPILOT_SHIM_ABI_VERSION 500
#endif

#if __has_include(<hip/amd_detail/device_library_decls.h>)
/* Declares __atomic_work_item_fence and its enum parameter types (HIP 5.x); included by every
 * hip_runtime.h anyway.  It needs <stdint.h>, which clang's HIP wrapper has included when it comes first
 * (it does not when clang found no HIP version file under --rocm-path). */
#include <stdint.h>
#include <hip/amd_detail/device_library_decls.h>
#define __KPILOT_SHIM_HAVE_AWIF 1
#endif

#define __KPILOT_FN extern "C" __attribute__((device)) inline __attribute__((always_inline, const))
#define __KPILOT_HELPER static __attribute__((device)) inline __attribute__((always_inline, const))
/* Loads of the hidden kernel arguments / dispatch packet.  may_alias: the library's loads carry OpenCL
 * type-based alias info that never matches the kernel's, so they alias anything, as these do. */
typedef unsigned short __attribute__((may_alias)) __kpilot_u16;
typedef unsigned int __attribute__((may_alias)) __kpilot_u32;
typedef unsigned long __attribute__((may_alias)) __kpilot_u64;
#define __KPILOT_IMPLICITARG(T) ((const __attribute__((address_space(4))) T *)__builtin_amdgcn_implicitarg_ptr())
#define __KPILOT_DISPATCH(T, byte_offset) \
    (*(const __attribute__((address_space(4))) T *)((const __attribute__((address_space(4))) char *) \
        __builtin_amdgcn_dispatch_ptr() + (byte_offset)))
/* ocml's DAZ_OPT(): true when the function flushes f32 denormals (folded per function). */
#define __KPILOT_DAZ_OPT() __builtin_isfpclass(__builtin_canonicalizef(0x1p-149f), __FPCLASS_POSZERO)
/* The library is OpenCL C: FP contraction within a statement only. */
#define __KPILOT_OCL_FP _Pragma("clang fp contract(on)")

typedef _Float16 __kpilot_2f16 __attribute__((ext_vector_type(2)));

/* ------------------------------------------------------------------ ockl: work-items (workitem.cl) */

/* hsa_kernel_dispatch_packet_t: workgroup_size_x/y/z (u16) at 4/6/8, grid_size_x/y/z (u32) at 12/16/20.
 * Code object v5 hidden arguments: block_count_x/y/z (u32) at 0/4/8, group_size_x/y/z (u16) at 12/14/16,
 * remainder_x/y/z (u16) at 18/20/22, global_offset_x/y/z (u64) at 40/48/56. */

/* One helper per dimension with constant offsets, as workitem.cl has them: the AMDGPU backend
 * (AMDGPULowerKernelAttributes) recognises these loads and, for HIP's uniform work-group sizes, folds
 * the partial-group remainder to 0 and the block_count comparison away, as it does for ROCm. */
#if __KPILOT_SHIM_ABI_VERSION < 500
#define __KPILOT_DIM_HELPERS(D, I)                                                                     \
    __KPILOT_HELPER __SIZE_TYPE__ __kpilot_global_offset_##D(void) { return __KPILOT_IMPLICITARG(__kpilot_u64)[I]; } \
    __KPILOT_HELPER unsigned int __kpilot_group_size_##D(void) { return __builtin_amdgcn_workgroup_size_##D(); } \
    __KPILOT_HELPER unsigned int __kpilot_grid_size_##D(void) { return __KPILOT_DISPATCH(__kpilot_u32, 12 + 4 * I); } \
    __KPILOT_HELPER __SIZE_TYPE__ __kpilot_global_size_##D(void) { return __kpilot_grid_size_##D(); }   \
    __KPILOT_HELPER __SIZE_TYPE__ __kpilot_local_size_##D(void) {                                      \
        unsigned int group_id = __builtin_amdgcn_workgroup_id_##D();                                   \
        unsigned int group_size = __kpilot_group_size_##D();                                           \
        unsigned int grid_size = __kpilot_grid_size_##D();                                             \
        unsigned int r = grid_size - group_id * group_size;                                            \
        return (r < group_size) ? r : group_size;                                                      \
    }                                                                                                  \
    __KPILOT_HELPER __SIZE_TYPE__ __kpilot_num_groups_##D(void) {                                      \
        unsigned int n = __kpilot_grid_size_##D();                                                     \
        unsigned int d = __kpilot_group_size_##D();                                                    \
        unsigned int q = n / d;                                                                        \
        return q + (n > q * d);                                                                        \
    }
#else
#define __KPILOT_DIM_HELPERS(D, I)                                                                     \
    __KPILOT_HELPER __SIZE_TYPE__ __kpilot_global_offset_##D(void) { return __KPILOT_IMPLICITARG(__kpilot_u64)[5 + I]; } \
    __KPILOT_HELPER unsigned int __kpilot_group_size_##D(void) { return __KPILOT_IMPLICITARG(__kpilot_u16)[6 + I]; } \
    __KPILOT_HELPER __SIZE_TYPE__ __kpilot_global_size_##D(void) {                                     \
        return __KPILOT_IMPLICITARG(__kpilot_u32)[I] * __KPILOT_IMPLICITARG(__kpilot_u16)[6 + I]     \
            + __KPILOT_IMPLICITARG(__kpilot_u16)[9 + I];                                             \
    }                                                                                                  \
    __KPILOT_HELPER __SIZE_TYPE__ __kpilot_local_size_##D(void) {                                      \
        /* a full group unless this is the last, partial one */                                        \
        return __builtin_amdgcn_workgroup_id_##D() < __KPILOT_IMPLICITARG(__kpilot_u32)[I]             \
            ? __KPILOT_IMPLICITARG(__kpilot_u16)[6 + I] : __KPILOT_IMPLICITARG(__kpilot_u16)[9 + I]; \
    }                                                                                                  \
    __KPILOT_HELPER __SIZE_TYPE__ __kpilot_num_groups_##D(void) {                                      \
        return __KPILOT_IMPLICITARG(__kpilot_u32)[I] + (__KPILOT_IMPLICITARG(__kpilot_u16)[9 + I] > 0); \
    }
#endif
__KPILOT_DIM_HELPERS(x, 0)
__KPILOT_DIM_HELPERS(y, 1)
__KPILOT_DIM_HELPERS(z, 2)
#undef __KPILOT_DIM_HELPERS

#define __KPILOT_GLOBAL_ID(D)                                                                          \
    __KPILOT_HELPER __SIZE_TYPE__ __kpilot_global_id_##D(void) {                                       \
        unsigned int l = __builtin_amdgcn_workitem_id_##D();                                           \
        unsigned int g = __builtin_amdgcn_workgroup_id_##D();                                          \
        unsigned int s = __kpilot_group_size_##D();                                                    \
        return (g * s + l) + __kpilot_global_offset_##D();                                             \
    }
__KPILOT_GLOBAL_ID(x)
__KPILOT_GLOBAL_ID(y)
__KPILOT_GLOBAL_ID(z)
#undef __KPILOT_GLOBAL_ID

#define __KPILOT_BY_DIM(X, Y, Z, OTHER) \
    switch (dim) {                      \
    case 0: return X;                   \
    case 1: return Y;                   \
    case 2: return Z;                   \
    default: return OTHER;              \
    }

__KPILOT_FN __SIZE_TYPE__ __ockl_get_local_id(unsigned int dim) {
    __KPILOT_BY_DIM(__builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
                    __builtin_amdgcn_workitem_id_z(), 0)
}

__KPILOT_FN __SIZE_TYPE__ __ockl_get_group_id(unsigned int dim) {
    __KPILOT_BY_DIM(__builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
                    __builtin_amdgcn_workgroup_id_z(), 0)
}

__KPILOT_FN __SIZE_TYPE__ __ockl_get_local_size(unsigned int dim) {
    __KPILOT_BY_DIM(__kpilot_local_size_x(), __kpilot_local_size_y(), __kpilot_local_size_z(), 1)
}

__KPILOT_FN __SIZE_TYPE__ __ockl_get_num_groups(unsigned int dim) {
    __KPILOT_BY_DIM(__kpilot_num_groups_x(), __kpilot_num_groups_y(), __kpilot_num_groups_z(), 1)
}

__KPILOT_FN __SIZE_TYPE__ __ockl_get_global_size(unsigned int dim) {
    __KPILOT_BY_DIM(__kpilot_global_size_x(), __kpilot_global_size_y(), __kpilot_global_size_z(), 1)
}

__KPILOT_FN __SIZE_TYPE__ __ockl_get_global_id(unsigned int dim) {
    __KPILOT_BY_DIM(__kpilot_global_id_x(), __kpilot_global_id_y(), __kpilot_global_id_z(), 0)
}
#undef __KPILOT_BY_DIM

/* ------------------------------------------------------------------ ockl: integer helpers */

__KPILOT_FN int __ockl_mul24_i32(int x, int y) {
    return ((x << 8) >> 8) * ((y << 8) >> 8);
}

__KPILOT_FN unsigned int __ockl_mul24_u32(unsigned int x, unsigned int y) {
    return (x & 0xffffffu) * (y & 0xffffffu);
}

__KPILOT_FN int __ockl_mul_hi_i32(int x, int y) {
    return (int)(((long)x * (long)y) >> 32);
}

__KPILOT_FN unsigned int __ockl_mul_hi_u32(unsigned int x, unsigned int y) {
    return (unsigned int)(((unsigned long)x * (unsigned long)y) >> 32);
}

__KPILOT_FN unsigned int __ockl_clz_u32(unsigned int x) {
    return x == 0u ? 32u : (unsigned int)__builtin_clz(x);   /* defined for 0, as ockl's */
}

/* ------------------------------------------------------------------ hip.bc: fences (__syncthreads) */

#if defined(__KPILOT_SHIM_HAVE_AWIF)
/* The flags are ignored, as the library does: global and local happens-before are tied together. */
extern "C" __attribute__((device)) inline __attribute__((always_inline)) void
__atomic_work_item_fence(__cl_mem_fence_flags flags, __memory_order order, __memory_scope scope) {
    (void)flags;
    if (order == __memory_order_relaxed)
        return;
#define __KPILOT_FENCE(SCOPE)                                                        \
    switch (order) {                                                                 \
    case __memory_order_acquire: __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, SCOPE); break; \
    case __memory_order_release: __builtin_amdgcn_fence(__ATOMIC_RELEASE, SCOPE); break; \
    case __memory_order_acq_rel: __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, SCOPE); break; \
    case __memory_order_seq_cst: __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, SCOPE); break; \
    default: break;                                                                  \
    }
    switch (scope) {
    case __memory_scope_sub_group: __KPILOT_FENCE("wavefront") break;
    case __memory_scope_work_group: __KPILOT_FENCE("workgroup") break;
    case __memory_scope_device: __KPILOT_FENCE("agent") break;
    case __memory_scope_all_svm_devices: __KPILOT_FENCE("") break;
    default: break;
    }
#undef __KPILOT_FENCE
}
#endif

/* ------------------------------------------------------------------ ocml */

/* ocml is compiled without fast-math flags; under -ffast-math, -ffinite-math-only, -fno-honor-nans,
 * -funsafe-math-optimizations, ... the same source inlined into the kernel would be optimised
 * differently (isnan folded to false, log2 without its denormal scaling), so the math part is left out
 * and those calls stay unresolved.  kernelpilot defines __KPILOT_SHIM_NO_OCML for such flags. */
#if !defined(__KPILOT_SHIM_NO_OCML) && !defined(__FAST_MATH__) && !__FINITE_MATH_ONLY__
#define __KPILOT_SHIM_HAVE_OCML 1

/* ------------------------------------------------------------------ ocml f32 */

__KPILOT_FN float __ocml_fabs_f32(float x) { return __builtin_fabsf(x); }
__KPILOT_FN float __ocml_fmax_f32(float x, float y) { return __builtin_fmaxf(x, y); }
__KPILOT_FN float __ocml_fmin_f32(float x, float y) { return __builtin_fminf(x, y); }
__KPILOT_FN float __ocml_fma_f32(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
__KPILOT_FN float __ocml_floor_f32(float x) { return __builtin_floorf(x); }
__KPILOT_FN float __ocml_ceil_f32(float x) { return __builtin_ceilf(x); }
__KPILOT_FN float __ocml_trunc_f32(float x) { return __builtin_truncf(x); }
__KPILOT_FN float __ocml_rint_f32(float x) { return __builtin_rintf(x); }
__KPILOT_FN float __ocml_round_f32(float x) { return __builtin_roundf(x); }
__KPILOT_FN float __ocml_copysign_f32(float x, float y) { return __builtin_copysignf(x, y); }
__KPILOT_FN int __ocml_isnan_f32(float x) { return __builtin_isnan(x); }
__KPILOT_FN int __ocml_isinf_f32(float x) { return __builtin_isinf(x); }
__KPILOT_FN int __ocml_isfinite_f32(float x) { return __builtin_isfinite(x); }

/* expF.cl / exp2F.cl: the generic intrinsics, which the AMDGPU backend expands accurately. */
__KPILOT_FN float __ocml_exp_f32(float x) { __KPILOT_OCL_FP return __builtin_expf(x); }
__KPILOT_FN float __ocml_exp2_f32(float x) { __KPILOT_OCL_FP return __builtin_exp2f(x); }

/* logF_base.h with COMPILING_LOG2 (the same for safe and unsafe math). */
__KPILOT_FN float __ocml_log2_f32(float x) {
    __KPILOT_OCL_FP
    if (__KPILOT_DAZ_OPT())
        return __builtin_amdgcn_logf(x);
    bool s = __builtin_isfpclass(x, __FPCLASS_NEGSUBNORMAL | __FPCLASS_POSSUBNORMAL);
    x *= s ? 0x1.0p+32f : 1.0f;
    return __builtin_amdgcn_logf(x) - (s ? 32.0f : 0.0f);
}

/* rsqrtF.cl */
__KPILOT_FN float __ocml_rsqrt_f32(float x) {
    __KPILOT_OCL_FP
    if (__KPILOT_DAZ_OPT())
        return __builtin_amdgcn_rsqf(x);
    bool s = x < 0x1.0p-100f;
    return __builtin_amdgcn_rsqf(x * (s ? 0x1.0p+100f : 1.0f)) * (s ? 0x1.0p+50f : 1.0f);
}

/* nativeF.cl / native_expF.cl */
__KPILOT_FN float __ocml_native_sin_f32(float x) { __KPILOT_OCL_FP return __builtin_sinf(x); }
__KPILOT_FN float __ocml_native_cos_f32(float x) { __KPILOT_OCL_FP return __builtin_cosf(x); }
/* native_expF.cl: native_exp2 (a bare v_exp_f32) of x*log2(e) */
__KPILOT_FN float __ocml_native_exp_f32(float x) {
    __KPILOT_OCL_FP
    return __builtin_amdgcn_exp2f(0x1.715476p+0f * x);
}

/* ------------------------------------------------------------------ ocml f16 */

__KPILOT_FN _Float16 __ocml_fabs_f16(_Float16 x) { return __builtin_fabsf16(x); }
__KPILOT_FN _Float16 __ocml_fmax_f16(_Float16 x, _Float16 y) { return __builtin_fmaxf16(x, y); }
__KPILOT_FN _Float16 __ocml_fmin_f16(_Float16 x, _Float16 y) { return __builtin_fminf16(x, y); }
__KPILOT_FN _Float16 __ocml_fma_f16(_Float16 a, _Float16 b, _Float16 c) { return __builtin_fmaf16(a, b, c); }
__KPILOT_FN _Float16 __ocml_floor_f16(_Float16 x) { return __builtin_floorf16(x); }
__KPILOT_FN _Float16 __ocml_ceil_f16(_Float16 x) { return __builtin_ceilf16(x); }
__KPILOT_FN _Float16 __ocml_trunc_f16(_Float16 x) { return __builtin_truncf16(x); }
__KPILOT_FN _Float16 __ocml_rint_f16(_Float16 x) { return __builtin_rintf16(x); }
__KPILOT_FN _Float16 __ocml_sqrt_f16(_Float16 x) { __KPILOT_OCL_FP return __builtin_sqrtf16(x); }
__KPILOT_FN int __ocml_isnan_f16(_Float16 x) { return __builtin_isnan(x); }
__KPILOT_FN int __ocml_isinf_f16(_Float16 x) { return __builtin_isinf(x); }
__KPILOT_FN _Float16 __ocml_exp2_f16(_Float16 x) { __KPILOT_OCL_FP return __builtin_exp2f16(x); }
__KPILOT_FN _Float16 __ocml_log2_f16(_Float16 x) { __KPILOT_OCL_FP return __builtin_log2f16(x); }
__KPILOT_FN _Float16 __ocml_rsqrt_f16(_Float16 x) { return __builtin_amdgcn_rsqh(x); }
/* expH.cl / logH.cl: through the f32 hardware instructions */
__KPILOT_FN _Float16 __ocml_exp_f16(_Float16 x) {
    __KPILOT_OCL_FP
    return (_Float16)__builtin_amdgcn_exp2f((float)x * 0x1.715476p+0f);
}
__KPILOT_FN _Float16 __ocml_log_f16(_Float16 x) {
    __KPILOT_OCL_FP
    return (_Float16)(__builtin_amdgcn_logf((float)x) * 0x1.62e430p-1f);
}

/* ------------------------------------------------------------------ ocml 2f16 */

__KPILOT_FN __kpilot_2f16 __ocml_fabs_2f16(__kpilot_2f16 x) { return __builtin_elementwise_abs(x); }
__KPILOT_FN __kpilot_2f16 __ocml_floor_2f16(__kpilot_2f16 x) { return __builtin_elementwise_floor(x); }
__KPILOT_FN __kpilot_2f16 __ocml_ceil_2f16(__kpilot_2f16 x) { return __builtin_elementwise_ceil(x); }
__KPILOT_FN __kpilot_2f16 __ocml_trunc_2f16(__kpilot_2f16 x) { return __builtin_elementwise_trunc(x); }
__KPILOT_FN __kpilot_2f16 __ocml_rint_2f16(__kpilot_2f16 x) { return __builtin_elementwise_rint(x); }
__KPILOT_FN __kpilot_2f16 __ocml_fma_2f16(__kpilot_2f16 a, __kpilot_2f16 b, __kpilot_2f16 c) {
    return __builtin_elementwise_fma(a, b, c);
}
/* mathH.h's UGEN: the f16 function on each half */
#define __KPILOT_UGEN(N) \
    __KPILOT_FN __kpilot_2f16 __ocml_##N##_2f16(__kpilot_2f16 x) { \
        return __kpilot_2f16{__ocml_##N##_f16(x.x), __ocml_##N##_f16(x.y)}; \
    }
__KPILOT_UGEN(sqrt)
__KPILOT_UGEN(exp)
__KPILOT_UGEN(exp2)
__KPILOT_UGEN(log)
__KPILOT_UGEN(log2)
__KPILOT_UGEN(rsqrt)
#undef __KPILOT_UGEN

#endif /* ocml */

#endif /* HIP device compile for AMDGCN */
#endif /* KERNELPILOT_HIP_DEVICE_SHIM_H */
