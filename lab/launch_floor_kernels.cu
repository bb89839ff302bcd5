extern "C" __global__ void empty11(unsigned long long a, unsigned long long b, unsigned long long c, unsigned long long d,
    unsigned long long e, unsigned long long f, unsigned long long g, unsigned long long h, unsigned i, unsigned j, unsigned k) {
  if (i == 0xFFFFFFFFu && threadIdx.x == 1234) *(unsigned*)a = j + k;
}
extern "C" __global__ void empty0() {}
