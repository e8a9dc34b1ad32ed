// Shared by the CUDA sources (gpu/sources.py puts it before each): the integer types, exact IEEE conversions
// between float and double, and the order-preserving bits that let unsigned atomicMin/atomicMax order floats.
typedef unsigned long long u64;
typedef unsigned int u32;
typedef long long i64;

// Exact conversions, also under cupy's -ftz=true (which would flush subnormals to zero in plain casts,
// unlike numpy and the twin): inline PTX without the .ftz modifier.
__device__ __forceinline__ float to_f32(double x) {
    float r;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(x));
    return r;
}
__device__ __forceinline__ double to_f64(float x) {
    double r;
    asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ u64 ord64(double x) {
    u64 b = (u64)__double_as_longlong(x);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ULL);
}
__device__ __forceinline__ double unord64(u64 k) {
    u64 b = (k >> 63) ? (k & 0x7fffffffffffffffULL) : ~k;
    return __longlong_as_double((i64)b);
}
__device__ __forceinline__ u32 ord32(float x) {
    u32 b = __float_as_uint(x);
    return (b >> 31) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float unord32(u32 k) {
    u32 b = (k >> 31) ? (k & 0x7fffffffu) : ~k;
    return __uint_as_float(b);
}
