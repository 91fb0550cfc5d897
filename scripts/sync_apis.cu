// The CUDA calls that block the CPU (or a stream), one of each per step,
// for the stall analysis's real-export tests: the calls PyTorch programs do
// not make (sync cudaMemcpy, cudaMemset on managed memory, cudaEventSynchronize,
// cudaStreamWaitEvent, async copies from pageable memory).  Each step is an
// NVTX push/pop range "step" (default domain, C API: recorded by nsys 2023.4
// and 2025.3 alike).
//
// Build and trace (see the lead's scripts/make_fixtures.sh for the flags):
//   nvcc -O2 -arch=native -o /tmp/sync_apis scripts/sync_apis.cu
//   nsys profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --export sqlite \
//       -o nsys2025_sync_apis /tmp/sync_apis 6
//
// Per step, in order (what tests/test_stalls.py expects, event by event):
//   A cudaMemcpyAsync host->device from pageable memory   blocking copy, alone
//   B cudaMemcpy device->host into pageable memory         blocking copy, alone
//   C cudaMemset on managed memory                         blocking memset
//     cudaMemcpy device->device                            no event (no host sync)
//   D cudaEventSynchronize                                 event sync
//   E cudaStreamWaitEvent                                  stream wait (CPU not blocked)
//   F cudaMemcpyAsync device->host pinned + cudaStreamSynchronize   one event
//   G cudaMemcpy host->device from pinned + cudaDeviceSynchronize    one event
// (a host copy followed by a blocking sync is one event; A and B are each
// followed by another blocking call that is not a sync, so they stay alone)
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,               \
                   cudaGetErrorString(err_));                                         \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

__global__ void busy(float* x, int n, int rounds) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    for (int r = 0; r < rounds; ++r) v = v * 0.999f + 0.001f;
    x[i] = v;
  }
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 6;
  const int n = 1 << 22;
  const size_t bytes = n * sizeof(float);
  const int threads = 256, blocks = (n + threads - 1) / threads;

  float *dev = nullptr, *dev2 = nullptr, *managed = nullptr, *pinned = nullptr;
  CHECK(cudaMalloc(&dev, bytes));
  CHECK(cudaMalloc(&dev2, bytes));
  CHECK(cudaMallocManaged(&managed, bytes));
  CHECK(cudaMallocHost(&pinned, bytes));
  std::vector<float> pageable(n, 1.0f);
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t done, other;
  CHECK(cudaEventCreate(&done));
  CHECK(cudaEventCreate(&other));
  CHECK(cudaMemcpy(dev, pageable.data(), bytes, cudaMemcpyHostToDevice));  // warm-up, outside the steps
  CHECK(cudaDeviceSynchronize());

  double checksum = 0;
  for (int step = 0; step < steps; ++step) {
    nvtxRangePushA("step");
    busy<<<blocks, threads, 0, s1>>>(dev, n, 64);
    CHECK(cudaMemcpyAsync(dev2, pageable.data(), bytes, cudaMemcpyHostToDevice, s1));  // A
    busy<<<blocks, threads, 0, s1>>>(dev, n, 64);
    CHECK(cudaMemcpy(pageable.data(), dev, bytes, cudaMemcpyDeviceToHost));             // B
    CHECK(cudaMemset(managed, 0, bytes));                                               // C
    CHECK(cudaMemcpy(dev2, dev, bytes, cudaMemcpyDeviceToDevice));                      // no event
    busy<<<blocks, threads, 0, s1>>>(dev, n, 64);
    CHECK(cudaEventRecord(done, s1));
    CHECK(cudaEventSynchronize(done));                                                  // D
    busy<<<blocks, threads, 0, s2>>>(dev2, n, 64);
    CHECK(cudaEventRecord(other, s2));
    CHECK(cudaStreamWaitEvent(s1, other, 0));                                           // E
    busy<<<blocks, threads, 0, s1>>>(dev, n, 64);
    CHECK(cudaMemcpyAsync(pinned, dev, sizeof(float), cudaMemcpyDeviceToHost, s1));     // F
    CHECK(cudaStreamSynchronize(s1));                                                   // F
    checksum += pinned[0];
    CHECK(cudaMemcpy(dev, pinned, 1024 * sizeof(float), cudaMemcpyHostToDevice));       // G
    CHECK(cudaDeviceSynchronize());                                                     // G
    nvtxRangePop();
  }
  std::printf("steps %d checksum %.6f\n", steps, checksum);
  CHECK(cudaFree(dev));
  CHECK(cudaFree(dev2));
  CHECK(cudaFree(managed));
  CHECK(cudaFreeHost(pinned));
  return 0;
}
