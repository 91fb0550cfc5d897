// Softmax over rows: one block per row, a shared-memory tree reduction.
#include <cuda_runtime.h>
#include <float.h>

__global__ void softmax_kernel(const float* __restrict__ in, float* __restrict__ out, int n_cols) {
    extern __shared__ float scratch[];
    const float* row_in = in + (size_t)blockIdx.x * n_cols;
    float* row_out = out + (size_t)blockIdx.x * n_cols;

    float local_max = -FLT_MAX;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) local_max = fmaxf(local_max, row_in[c]);
    scratch[threadIdx.x] = local_max;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
        __syncthreads();
    }
    float row_max = scratch[0];
    __syncthreads();

    float local_sum = 0.f;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) local_sum += __expf(row_in[c] - row_max);
    scratch[threadIdx.x] = local_sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
        __syncthreads();
    }
    float inv_sum = 1.f / scratch[0];
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) row_out[c] = __expf(row_in[c] - row_max) * inv_sum;
}
