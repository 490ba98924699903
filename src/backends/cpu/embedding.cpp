// Embedding lookup (a row gather) and its backward (a row scatter-add).
#include <cstring>
#include <vector>

#include "backends/embedding.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace mixtrain::backends::cpu {

namespace {
void check_indices(const int64_t* idx, int64_t k, int64_t v) {
  for (int64_t i = 0; i < k; ++i)
    MT_CHECK(idx[i] >= 0 && idx[i] < v, "embedding: index ", idx[i], " at position ", i,
             " is out of range for a table of ", v, " rows");
}
}  // namespace

void embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  MT_CHECK(weight.is_contiguous() && indices.is_contiguous() && out.is_contiguous(),
           "embedding: expected contiguous tensors");
  const int64_t v = weight.size(0), d = weight.size(1), k = indices.numel();
  const int64_t* idx = indices.data_ptr<int64_t>();
  check_indices(idx, k, v);
  const size_t row_bytes = static_cast<size_t>(d) * element_size(weight.dtype());
  const char* pw = static_cast<const char*>(weight.raw_data());
  char* po = static_cast<char*>(out.raw_data());
  parallel_for(k, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, d)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::memcpy(po + i * row_bytes, pw + idx[i] * row_bytes, row_bytes);
  });
}

void embedding_backward(const Tensor& grad_out, const Tensor& indices, int64_t padding_idx,
                                    const Tensor& grad_weight) {
  MT_CHECK(grad_out.is_contiguous() && indices.is_contiguous() && grad_weight.is_contiguous(),
           "embedding_backward: expected contiguous tensors");
  const int64_t v = grad_weight.size(0), d = grad_weight.size(1), k = indices.numel();
  const int64_t* idx = indices.data_ptr<int64_t>();
  check_indices(idx, k, v);  // a write outside the table would corrupt memory: check again
  dispatch_floating(grad_weight.dtype(), "embedding_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using W = acc_t<T>;
    const T* pg = static_cast<const T*>(grad_out.raw_data());
    T* pw = static_cast<T*>(grad_weight.raw_data());
    // Repeated tokens add up, so sum in the compute type and round each row once. Threads own
    // disjoint column ranges of the table, so no two write the same element.
    std::vector<W> acc(static_cast<size_t>(v * d), W(0));
    parallel_for(d, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, k)), [&](int64_t b, int64_t e) {
      for (int64_t i = 0; i < k; ++i) {
        if (idx[i] == padding_idx) continue;
        W* row = acc.data() + idx[i] * d;
        const T* g = pg + i * d;
        for (int64_t j = b; j < e; ++j) row[j] += static_cast<W>(g[j]);
      }
    });
    for (int64_t i = 0; i < v * d; ++i) pw[i] = static_cast<T>(acc[i]);
  });
}

void register_embedding() {
  backends::embedding.set(DeviceType::CPU, embedding);
  backends::embedding_backward.set(DeviceType::CPU, embedding_backward);
}

}  // namespace mixtrain::backends::cpu
