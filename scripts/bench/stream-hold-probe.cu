// What holding a stream costs the host (s41, docs/data-parallel.md): which host CUDA calls
// wait while a host function (cudaLaunchHostFunc) holds another stream, and how soon a stream
// held by cuStreamWaitValue32 on a host-mapped flag goes on once the flag is set. Build and run
// on the GPU machine: nvcc -O2 -std=c++17 -arch=sm_90 stream-hold-probe.cu -o probe -lcuda && ./probe
#include <cuda.h>
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <functional>

using Clock = std::chrono::steady_clock;
static double ms(Clock::time_point a) { return std::chrono::duration<double, std::milli>(Clock::now() - a).count(); }
#define CK(x)                                        \
  do {                                               \
    auto e = (x);                                    \
    if (e != cudaSuccess) {                          \
      printf("%s: %s\n", #x, cudaGetErrorString(e)); \
    }                                                \
  } while (0)
#define CKD(x)                   \
  do {                           \
    CUresult e = (x);            \
    if (e != CUDA_SUCCESS) {     \
      const char* s;             \
      cuGetErrorString(e, &s);   \
      printf("%s: %s\n", #x, s); \
    }                            \
  } while (0)

__global__ void spin(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * 1.0001f + 1.f;
}

static std::atomic<int> release{0};
static void CUDART_CB hold(void*) {
  while (!release.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

static void timeCalls(const char* label, cudaStream_t A, cudaStream_t B, float* d, float* h, int n) {
  auto t = [&](const char* what, std::function<void()> f) {
    auto s = Clock::now();
    f();
    printf("  [%s] %-44s %8.2f ms\n", label, what, ms(s));
  };
  t("kernel launch on B", [&] { spin<<<(n + 255) / 256, 256, 0, B>>>(d, n); });
  t("H2D pinned async on B", [&] { CK(cudaMemcpyAsync(d, h, n * 4, cudaMemcpyHostToDevice, B)); });
  t("D2H pinned async on B", [&] { CK(cudaMemcpyAsync(h, d, n * 4, cudaMemcpyDeviceToHost, B)); });
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  t("event record on B", [&] { CK(cudaEventRecord(ev, B)); });
  t("stream synchronize B", [&] { CK(cudaStreamSynchronize(B)); });
  t("event synchronize (B's)", [&] { CK(cudaEventSynchronize(ev)); });
  t("event query", [&] { cudaEventQuery(ev); });
  t("kernel launch on A (behind the hold)", [&] { spin<<<(n + 255) / 256, 256, 0, A>>>(d, n); });
  t("H2D pinned async on A", [&] { CK(cudaMemcpyAsync(d, h, n * 4, cudaMemcpyHostToDevice, A)); });
  t("stream wait event A<-B", [&] { CK(cudaStreamWaitEvent(A, ev, 0)); });
  void* hp = nullptr;
  void* dp = nullptr;
  t("cudaHostAlloc 4 MB", [&] { CK(cudaHostAlloc(&hp, 4 << 20, cudaHostAllocDefault)); });
  t("cudaMalloc 64 MB", [&] { CK(cudaMalloc(&dp, 64 << 20)); });
  t("cudaFree 64 MB", [&] { CK(cudaFree(dp)); });
  t("cudaFreeHost 4 MB", [&] { CK(cudaFreeHost(hp)); });
  t("cudaLaunchHostFunc on B (no-op)", [&] {
    CK(cudaLaunchHostFunc(
        B, [](void*) {}, nullptr));
  });
  t("stream synchronize B after a host func", [&] { CK(cudaStreamSynchronize(B)); });
  cudaEventDestroy(ev);
}

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  int nor = -1, m64 = -1, memops = -1;
  CUdevice dev;
  CKD(cuDeviceGet(&dev, 0));
  CKD(cuDeviceGetAttribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev));
  CKD(cuDeviceGetAttribute(&m64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
  CKD(cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev));
  int drv = 0;
  cudaDriverGetVersion(&drv);
  printf("driver %d; wait NOR %d, 64-bit mem ops %d, mem ops v1 %d\n", drv, nor, m64, memops);
  cudaStream_t A, B;
  CK(cudaStreamCreateWithFlags(&A, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&B, cudaStreamNonBlocking));
  const int n = 1 << 22;
  float* d;
  float* h;
  CK(cudaMalloc(&d, n * 4));
  CK(cudaHostAlloc((void**)&h, n * 4, cudaHostAllocDefault));
  timeCalls("idle", A, B, d, h, n);
  CK(cudaDeviceSynchronize());

  printf("== host function holding stream A for 300 ms\n");
  release = 0;
  CK(cudaLaunchHostFunc(A, hold, nullptr));
  std::thread releaser([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    release = 1;
  });
  auto s = Clock::now();
  timeCalls("hostfn", A, B, d, h, n);
  printf("  (calls done %.1f ms after the hold began)\n", ms(s));
  releaser.join();
  CK(cudaDeviceSynchronize());

  printf("== cuStreamWaitValue32 holding stream A for 300 ms\n");
  unsigned int* flag;
  CK(cudaHostAlloc((void**)&flag, 64, cudaHostAllocMapped));
  *flag = 0;
  unsigned int* dflag;
  CK(cudaHostGetDevicePointer((void**)&dflag, flag, 0));
  CKD(cuStreamWaitValue32((CUstream)A, (CUdeviceptr)dflag, 1, CU_STREAM_WAIT_VALUE_GEQ));
  cudaEvent_t after;
  CK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
  CK(cudaEventRecord(after, A));
  Clock::time_point setAt;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    setAt = Clock::now();
    __atomic_store_n(flag, 1u, __ATOMIC_SEQ_CST);
  });
  s = Clock::now();
  timeCalls("waitvalue", A, B, d, h, n);
  printf("  (calls done %.1f ms after the wait began)\n", ms(s));
  setter.join();
  CK(cudaEventSynchronize(after));
  printf("  stream A went on %.3f ms after the flag was set\n", ms(setAt));
  // Latency, repeated: the flag set by a thread, the stream's event waited for.
  double worst = 0, sum = 0;
  for (int i = 2; i < 22; ++i) {
    CKD(cuStreamWaitValue32((CUstream)A, (CUdeviceptr)dflag, (unsigned)i, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cudaEventRecord(after, A));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto t0 = Clock::now();
    __atomic_store_n(flag, (unsigned)i, __ATOMIC_SEQ_CST);
    CK(cudaEventSynchronize(after));
    double l = ms(t0);
    worst = l > worst ? l : worst;
    sum += l;
  }
  printf("  wait-value release latency over 20: mean %.3f ms, worst %.3f ms\n", sum / 20, worst);
  printf("done: %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
}
