// Deliberately bad kernels for profkit's analyses to catch.
#include <cuda_runtime.h>

// Strided access: neighbouring threads touch addresses `stride` floats apart,
// so loads are 32-bit and uncoalesced.
__global__ void gelu_strided_kernel(const float* __restrict__ in, float* __restrict__ out, int n, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        long j = ((long)i * stride) % n;
        float x = in[j];
        out[j] = 0.5f * x * (1.0f + tanhf(0.79788456f * (x + 0.044715f * x * x * x)));
    }
}

// Register pressure: 64 independent accumulators per thread stay live across
// the loop, so ptxas needs well over 64 registers and occupancy drops.
#define ACC 64
__global__ void register_heavy_kernel(const float* __restrict__ in, float* __restrict__ out, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc[ACC];
#pragma unroll
    for (int k = 0; k < ACC; ++k) acc[k] = in[(i + k * 4099) % n];
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int k = 0; k < ACC; ++k) acc[k] = fmaf(acc[k], acc[(k + 1) % ACC], 0.5f * acc[(k + 7) % ACC]);
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < ACC; ++k) s += acc[k];
    out[i] = s;
}
