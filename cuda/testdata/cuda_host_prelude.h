// cuda_host_prelude.h: host C++ stand-ins for CUDA's keywords, built-in variables, vector types and
// intrinsics, declarations only, so that g++ can parse the kernel files and instantiate their templates
// (TestKernelsParseAsCpp). Nothing here is ever compiled for a device or run: NVRTC compiles the kernels on
// the GPU machine. It checks names, types and syntax; inline PTX is neither assembled nor checked.
// __CUDA_ARCH__ is 900 with sm_90a's features on, so the wgmma kernels' bodies are parsed too.
#include <algorithm>
#include <cmath>
#define __device__
#define __host__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __shared__
#define __align__(x)
#define __restrict__
#define __CUDA_ARCH_FEAT_SM90_ALL 1
#define __CUDA_ARCH__ 900
#define __constant__
using std::isnan;
using std::max;
using std::min;
struct dim3_ { unsigned x, y, z; };
extern dim3_ threadIdx, blockIdx, blockDim, gridDim;
float __fadd_rn(float, float); float __fmul_rn(float, float); float __fsub_rn(float, float); float __fdiv_rn(float,float);
float __frcp_rn(float); double __dadd_rn(double,double); float __fmaf_rn(float,float,float);
float __int_as_float(int); float __uint_as_float(unsigned); unsigned __float_as_uint(float); int __float_as_int(float);
template <class T> T __shfl_xor_sync(unsigned, T, int); template <class T> T __shfl_sync(unsigned, T, int);
void __syncthreads(); void __syncwarp(unsigned m = 0xffffffff); float __ldg(const float*);
struct float4 { float x, y, z, w; }; struct float2 { float x, y; }; struct uint4 { unsigned x, y, z, w; }; struct uint2 { unsigned x, y; };
float4 __ldg(const float4*);
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
float expf(float);
size_t __cvta_generic_to_shared(const void*);
struct int4 { int x, y, z, w; }; struct int2 { int x, y; };
unsigned __byte_perm(unsigned, unsigned, unsigned); float4 __ldcs(const float4*); float __ldcs(const float*);
float __frsqrt_rn(float); double __ddiv_rn(double,double); double __dmul_rn(double,double); double __dsub_rn(double,double);
double __fma_rn(double,double,double); int __double2loint(double); float __double2float_rn(double);
template <class T> T atomicAdd(T*, T); long long clock64(); int __any_sync(unsigned, int); int __all_sync(unsigned, int); unsigned __ballot_sync(unsigned, int);
int __ffs(unsigned); int __popc(unsigned); unsigned __match_any_sync(unsigned, int); unsigned __reduce_or_sync(unsigned, unsigned);
