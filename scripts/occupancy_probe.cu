// Records the CUDA runtime's own occupancy answers, and launches kernels for
// ncu to profile, over a grid of register counts, block sizes and shared
// memory sizes.  Made on the GPU host by scripts/make_fixtures.sh:
//
//   nvcc -O3 -arch=sm_90 -o occupancy_probe scripts/occupancy_probe.cu
//   ./occupancy_probe table  > occupancy_api.json   # cudaOccupancy... values
//   ncu ... ./occupancy_probe launch                  # a subset, for ncu
//
// Kernels differ in live accumulators (-> registers) and static shared
// memory; dynamic shared memory and block size vary per launch.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

template <int ACC, int STATIC_SMEM_FLOATS>
__global__ void probe_kernel(const float* __restrict__ in, float* __restrict__ out, int n, int dyn_floats) {
    extern __shared__ float dyn[];
    __shared__ float fixed[STATIC_SMEM_FLOATS > 0 ? STATIC_SMEM_FLOATS : 1];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc[ACC];
#pragma unroll
    for (int k = 0; k < ACC; ++k) acc[k] = in[(i * 7 + k * 131) % n];
#pragma unroll 1
    for (int it = 0; it < 4; ++it) {
#pragma unroll
        for (int k = 0; k < ACC; ++k) acc[k] = fmaf(acc[k], acc[(k + 1) % ACC], acc[(k + 3) % ACC]);
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < ACC; ++k) s += acc[k];
    fixed[threadIdx.x % (STATIC_SMEM_FLOATS > 0 ? STATIC_SMEM_FLOATS : 1)] = s;
    // launches without dynamic shared memory must not touch it (illegal address)
    if (dyn_floats > 0) dyn[threadIdx.x % dyn_floats] = s;
    __syncthreads();
    if (i < n) out[i] = s + fixed[(threadIdx.x + 1) % (STATIC_SMEM_FLOATS > 0 ? STATIC_SMEM_FLOATS : 1)];
}

struct Variant { const char* name; const void* fn; };
#define V(acc, st) { "probe_kernel<" #acc "," #st ">", (const void*)probe_kernel<acc, st> }
static Variant variants[] = {
    V(4, 0), V(24, 0), V(40, 0), V(56, 0), V(88, 0), V(120, 0), V(200, 0),
    V(24, 4096), V(40, 8192),
};
static const int block_sizes[] = {32, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 896, 1024};
static const int dyn_smem[] = {0, 4096, 12288, 32768, 49152, 73728, 102400, 160000, 232448};
static const int carveouts[] = {-1, 0, 50, 100};  // -1: driver default

int main(int argc, char** argv) {
    bool launch = argc > 1 && strcmp(argv[1], "launch") == 0;
    int n = 1 << 20;
    float *in, *out;
    CHECK(cudaMalloc(&in, n * sizeof(float)));
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    CHECK(cudaMemset(in, 0, n * sizeof(float)));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if (!launch) printf("{\"device\": \"%s\", \"cc\": \"%d.%d\", \"sm_count\": %d, \"rows\": [\n",
                        prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    bool first = true;
    int launched = 0;
    for (auto& v : variants) {
        cudaFuncAttributes attr;
        CHECK(cudaFuncGetAttributes(&attr, v.fn));
        CHECK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)(prop.sharedMemPerBlockOptin - attr.sharedSizeBytes)));
        for (int carve : carveouts) {
            if (launch && carve != -1) continue;
            if (carve >= 0) CHECK(cudaFuncSetAttribute(v.fn, cudaFuncAttributePreferredSharedMemoryCarveout, carve));
            for (int bs : block_sizes) {
                for (int smem : dyn_smem) {
                    if (smem != 0 && smem < bs * 4) continue;
                    if (smem + attr.sharedSizeBytes > prop.sharedMemPerBlockOptin) continue;
                    int blocks = -1;
                    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, v.fn, bs, smem);
                    if (launch) {
                        // a thinned grid for ncu: every register variant, a spread of shapes
                        if (blocks <= 0 || (bs % 96 != 0 && bs != 128 && bs != 1024) ||
                            (smem != 0 && smem != 49152 && smem != 102400 && smem != 232448)) continue;
                        int dyn_floats = smem / (int)sizeof(float);
                        void* args[] = {&in, &out, &n, &dyn_floats};
                        CHECK(cudaLaunchKernel(v.fn, dim3(prop.multiProcessorCount * 3 + 7), dim3(bs), args, smem, 0));
                        ++launched;
                        continue;
                    }
                    printf("%s{\"kernel\": \"%s\", \"registers\": %d, \"static_smem\": %zu, \"local_bytes\": %zu, "
                           "\"max_threads\": %d, \"block_size\": %d, \"dynamic_smem\": %d, \"carveout\": %d, "
                           "\"blocks_per_sm\": %d, \"error\": \"%s\"}",
                           first ? "" : ",\n", v.name, attr.numRegs, attr.sharedSizeBytes, attr.localSizeBytes,
                           attr.maxThreadsPerBlock, bs, smem, carve, e == cudaSuccess ? blocks : -1,
                           e == cudaSuccess ? "" : cudaGetErrorString(e));
                    first = false;
                }
            }
        }
    }
    CHECK(cudaDeviceSynchronize());
    if (!launch) printf("\n]}\n");
    else fprintf(stderr, "launched %d probe kernels\n", launched);
    return 0;
}
