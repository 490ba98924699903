// GCC 12 with AVX-512 (-march=native on Zen 4/5, Sapphire Rapids) can build a 32-byte constant
// store from a wrong broadcast: {5,0,5,0,0,0,0,0} lands in memory as {5,0,5,0,5,0,5,0}. This
// program exits non-zero when the compiler flags in use produce that miscompilation.
#include <cstring>
#include <vector>

__attribute__((noinline)) void store_ints(int* out) {
  std::vector<int> v{5, 0, 5, 0, 0, 0, 0, 0};
  std::memcpy(out, v.data(), sizeof(int) * 8);
}
__attribute__((noinline)) void store_floats(float* out) {
  std::vector<float> v{1, 0, 1, 0, 0, 0, 0, 0};
  std::memcpy(out, v.data(), sizeof(float) * 8);
}

int main() {
  int i[8];
  float f[8];
  store_ints(i);
  store_floats(f);
  for (int k = 4; k < 8; ++k)
    if (i[k] != 0 || f[k] != 0.0f) return 1;
  return 0;
}
