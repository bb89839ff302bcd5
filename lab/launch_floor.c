// Build: nvcc -cubin -arch=sm_90a -o empty.cubin lab/launch_floor_kernels.cu; gcc -O2 -o launch_floor lab/launch_floor.c -I/usr/local/cuda/include -ldl
// Run:   ./launch_floor empty.cubin
// Host cost of cuLaunchKernel on this machine, in C: per-call time over batches of 50 launches of an
// empty kernel (device synchronized between batches), median of the batches.
#include <cuda.h>
#include <dlfcn.h>
#define F(name) static __typeof__(&name) p_##name;
F(cuInit) F(cuDeviceGet) F(cuDevicePrimaryCtxRetain) F(cuCtxSetCurrent) F(cuModuleLoad) F(cuModuleGetFunction)
F(cuStreamCreate) F(cuLaunchKernel) F(cuCtxSynchronize) F(cuCtxGetCurrent)
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmp(const void* a, const void* b) { double x = *(double*)a, y = *(double*)b; return x < y ? -1 : x > y; }
#define CK(x) do { CUresult r = (x); if (r) { printf("%s failed: %d\n", #x, r); exit(1); } } while (0)
int main(int argc, char** argv) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW); if (!h) { printf("no libcuda\n"); return 1; }
#define L(name) p_##name = (__typeof__(p_##name))dlsym(h, #name);
#define L2(name, sym) p_##name = (__typeof__(p_##name))dlsym(h, sym);
  L(cuInit) L(cuDeviceGet) L2(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") L(cuCtxSetCurrent) L(cuModuleLoad)
  L(cuModuleGetFunction) L2(cuStreamCreate, "cuStreamCreate") L2(cuLaunchKernel, "cuLaunchKernel")
  L2(cuCtxSynchronize, "cuCtxSynchronize") L2(cuCtxGetCurrent, "cuCtxGetCurrent")
  CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction f11, f0; CUstream st;
  CK(p_cuInit(0)); CK(p_cuDeviceGet(&dev, 0)); CK(p_cuDevicePrimaryCtxRetain(&ctx, dev)); CK(p_cuCtxSetCurrent(ctx));
  CK(p_cuModuleLoad(&mod, argv[1])); CK(p_cuModuleGetFunction(&f11, mod, "empty11")); CK(p_cuModuleGetFunction(&f0, mod, "empty0"));
  CK(p_cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  unsigned long long p[8] = {0}; unsigned u[3] = {1, 2, 3};
  void* args[11]; for (int i = 0; i < 8; ++i) args[i] = &p[i]; for (int i = 0; i < 3; ++i) args[8 + i] = &u[i];
  for (int mode = 0; mode < 4; ++mode) {
    CUfunction fn = (mode % 2) ? f0 : f11; CUstream s = mode < 2 ? 0 : st;
    double per[200];
    for (int b = 0; b < 200; ++b) {
      double t0 = now();
      for (int i = 0; i < 50; ++i) CK(p_cuLaunchKernel(fn, 132, 1, 1, 384, 1, 1, 0, s, (mode % 2) ? NULL : args, NULL));
      per[b] = (now() - t0) / 50; CK(p_cuCtxSynchronize());
    }
    qsort(per, 200, sizeof(double), cmp);
    printf("cuLaunchKernel %-8s %-14s: median %.2f us/launch (p10 %.2f, p90 %.2f)\n", (mode % 2) ? "0 args" : "11 args",
           mode < 2 ? "legacy stream" : "own stream", per[100], per[20], per[180]);
  }
  double t0 = now(); for (int i = 0; i < 1000; ++i) CK(p_cuCtxSynchronize()); printf("cuCtxSynchronize idle: %.2f us\n", (now() - t0) / 1000);
  CUcontext c; t0 = now(); for (int i = 0; i < 1000; ++i) p_cuCtxGetCurrent(&c); printf("cuCtxGetCurrent: %.3f us\n", (now() - t0) / 1000);
  return 0;
}
