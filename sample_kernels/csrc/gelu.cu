// GELU (tanh approximation), one thread per element: the CS336 lecture 6 kernel.
#include <cuda_runtime.h>

__global__ void gelu_kernel(const float* __restrict__ in, float* __restrict__ out, int num_elements) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < num_elements) {
        float x = in[i];
        out[i] = 0.5f * x * (1.0f + tanhf(0.79788456f * (x + 0.044715f * x * x * x)));
    }
}

// Four elements per thread through float4: the vectorized form (LDG.E.128).
__global__ void gelu_vec4_kernel(const float4* __restrict__ in, float4* __restrict__ out, int num_vec4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < num_vec4) {
        float4 v = in[i];
        float* f = reinterpret_cast<float*>(&v);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float x = f[k];
            f[k] = 0.5f * x * (1.0f + tanhf(0.79788456f * (x + 0.044715f * x * x * x)));
        }
        out[i] = v;
    }
}
