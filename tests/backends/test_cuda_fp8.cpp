// The fp8 family on CUDA against the CPU backend: the casts bit for bit (every fp16 and bf16
// pattern and the generated fp32 streams of tests/core/data/fp8_torch_reference.json, with their
// amax and saturation counts), the scale update bit for bit, scaled_mm through cuBLASLt against an
// fp64 reference in every format pair and output dtype (operands in and out of the TN layout),
// and fp8_linear's forward and backward against the CPU's.
#include "backends/cuda_test_util.h"
#include "backends/fp8.h"
#include "support/fp8_reference.h"

namespace mixtrain::testing {
namespace {

class CudaFp8 : public CudaTest {};

// A case's inputs as a CPU tensor of its source dtype.
Tensor case_tensor(const nlohmann::json& c) {
  const fp8::CaseView v = fp8::view(c);
  const std::vector<uint64_t> bits = fp8::case_inputs(c);
  const int64_t n = static_cast<int64_t>(bits.size());
  if (v.source == "float32") {
    std::vector<float> x(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) x[i] = fp8::source_value(v.source, bits[i]);
    return from_vector<float>(x, {n});
  }
  Tensor t = empty({n}, TensorOptions(v.source == "float16" ? kFloat16 : kBFloat16));
  auto* p = static_cast<uint16_t*>(t.raw_data());
  for (size_t i = 0; i < bits.size(); ++i) p[i] = static_cast<uint16_t>(bits[i]);
  return t;
}

TEST_F(CudaFp8, CastsAreTheCpusBitForBitWithTheirStatistics) {
  const nlohmann::json ref = fp8::load_torch_reference();
  ASSERT_GE(ref["cases"].size(), 19u);
  for (const nlohmann::json& c : ref["cases"]) {
    const fp8::CaseView v = fp8::view(c);
    if (v.source == "float64") continue;  // to_float8 takes fp32, fp16, bf16
    SCOPED_TRACE(v.name);
    const Tensor x = case_tensor(c);
    const DType fmt = v.e5m2 ? kFloat8E5M2 : kFloat8E4M3FN;
    const Tensor scale = from_vector<float>({v.scale}, {1});
    const Tensor gx = on(x, gpu_device()), gscale = on(scale, gpu_device());
    Tensor amax = zeros({1}), count = zeros({1}, TensorOptions(kInt64));
    Tensor gamax = on(amax, gpu_device()), gcount = on(count, gpu_device());
    const Tensor q = to_float8(x, fmt, v.scaled ? scale : Tensor(), v.saturate, amax, count);
    const Tensor gq = to_float8(gx, fmt, v.scaled ? gscale : Tensor(), v.saturate, gamax, gcount);
    const std::vector<uint8_t> want = bytes_of(q), got = bytes_of(gq.to(Device::cpu()));
    EXPECT_EQ(fp8::hex32(fp8::crc32(got.data(), got.size())), c["crc32"].get<std::string>());
    EXPECT_TRUE(got == want);
    EXPECT_EQ(gamax.to(Device::cpu()).item<float>(), amax.item<float>());
    EXPECT_EQ(gcount.to(Device::cpu()).item<int64_t>(), count.item<int64_t>());
    EXPECT_EQ(count.item<int64_t>(), c["saturated"].get<int64_t>());
    // The plain cast (the copy kernel), and back to fp32.
    if (!v.scaled && !v.saturate) {
      EXPECT_TRUE(bytes_of(gx.to(fmt).to(Device::cpu())) == bytes_of(x.to(fmt)));
      EXPECT_TRUE(bytes_of(gq.to(kFloat32).to(Device::cpu())) == bytes_of(q.to(kFloat32)));
    }
  }
}

TEST_F(CudaFp8, ScaleUpdateIsTheCpusBitForBit) {
  for (bool current : {false, true}) {
    const Tensor h = random_tensor({7, 3}, kFloat32, 11, 0, 300) * random_tensor({7, 3}, kFloat32, 12, 0, 1).pow(6.0);
    Tensor hz = h.clone();
    {
      NoGradGuard no_grad;
      hz.narrow(1, 1, 1).zero_();  // a slot that saw nothing: delayed scaling keeps its scale
    }
    const Tensor s = from_vector<float>({2.0f, 3.0f, 5.0f}, {3});
    backends::Fp8ScaleArgs args;
    args.fp8_max[2] = kFloat8E5M2Max;
    args.margin = 2;
    args.keep_scale_on_zero = !current;
    compare_backends(current ? "current" : "delayed", {hz, s},
                     {{{7, 3}, kFloat32, "history", exact()}, {{3}, kFloat32, "scale", exact()},
                      {{3}, kFloat32, "scale_inv", exact()}},
                     [args](auto& bk, const auto& in, const auto& out) {
                       Tensor(out[0]).copy_(in[0]);
                       Tensor(out[1]).copy_(in[1]);
                       backends::fp8_update_scale(bk, out[0], out[1], out[2], args);
                     });
  }
}

// scaled_mm against the fp64 reference (support/fp8_reference.h), on the CPU copies of a and b.
// Hopper's fp8 tensor cores sum with about 14 bits between cuBLASLt's promotions to fp32
// (fp8_reference.h), so the GPU's products are further from the fp64 reference than fp32 sums.
constexpr int kTensorCoreAccumulatorBits = 14;

::testing::AssertionResult matches_reference(const Tensor& got, const Tensor& a, const Tensor& b, double s,
                                             const Tensor& bias, DType out) {
  return fp8::within(to_doubles(got.to(Device::cpu())),
                     fp8::product_reference(to_doubles(a.contiguous().to(kFloat32)), to_doubles(b.contiguous().to(kFloat32)),
                                            a.size(0), a.size(1), b.size(1), s, bias.defined() ? to_doubles(bias) : std::vector<double>(),
                                            out, kTensorCoreAccumulatorBits));
}

TEST_F(CudaFp8, ScaledMmMatchesTheFp64ReferenceInEveryLayoutAndDtype) {
  const std::pair<DType, DType> formats[] = {
      {kFloat8E4M3FN, kFloat8E4M3FN}, {kFloat8E5M2, kFloat8E4M3FN}, {kFloat8E4M3FN, kFloat8E5M2}};
  uint64_t seed = 40;
  for (const auto& [fa, fb] : formats)
    for (DType out : {kFloat32, kBFloat16, kFloat16})
      for (int layout = 0; layout < 4; ++layout) {  // bit 0: a transposed, bit 1: b row-major
        const int64_t m = 48, k = 64, n = 32;
        SCOPED_TRACE(std::string(dtype_name(fa)) + " x " + dtype_name(fb) + " -> " + dtype_name(out) + " layout " +
                     std::to_string(layout));
        auto data = [&](const Shape& shape, DType fmt) {
          const double span = fmt == kFloat8E4M3FN ? 400.0 : 50000.0;
          Tensor x = random_tensor(shape, kFloat32, ++seed);
          return (x * x * x * span).to(fmt);
        };
        const Tensor a = layout & 1 ? data({k, m}, fa).t() : data({m, k}, fa);
        const Tensor b = layout & 2 ? data({k, n}, fb) : data({n, k}, fb).t();
        const float sa = out == kFloat16 ? 1.7e-4f : 0.37f, sb = out == kFloat16 ? 2.3e-3f : 1.9e-2f;
        const Tensor scale_a = from_vector<float>({sa}, {1}), scale_b = from_vector<float>({sb}, {1});
        const Tensor bias = random_tensor({n}, out == kFloat32 ? kBFloat16 : out, ++seed, -2, 2);
        const Tensor got = scaled_mm(on(a, gpu_device()), on(b, gpu_device()), on(scale_a, gpu_device()),
                                     on(scale_b, gpu_device()), out, on(bias, gpu_device()));
        EXPECT_TRUE(matches_reference(got, a, b, static_cast<double>(sa * sb), bias, out));
      }
}

TEST_F(CudaFp8, ScaledMmNamesWhatCublasLtCannotTake) {
  const Tensor a = on(random_tensor({16, 24}, kFloat32, 1).to(kFloat8E4M3FN), gpu_device());
  const Tensor b = on(random_tensor({24, 16}, kFloat32, 2).to(kFloat8E4M3FN), gpu_device());
  const Tensor s = on(ones({1}), gpu_device());
  expect_error([&] { scaled_mm(a, b, s, s); }, {"scaled_mm", "multiples of 16", "[16, 24]"});
}

TEST_F(CudaFp8, Fp8LinearForwardAndBackwardMatchTheCpu) {
  // Delayed scaling with fixed scales: both backends cast the same values to the same bytes, so
  // the products differ only in how they are summed (fp32 on the CPU, the tensor cores' narrower
  // partial sums on the GPU).
  auto make_state = [](Device d) {
    Fp8LinearState s;
    s.scale = from_vector<float>({40.0f, 3000.0f, 20000.0f}, {3}).to(d);
    s.scale_inv = from_vector<float>({1 / 40.0f, 1 / 3000.0f, 1 / 20000.0f}, {3}).to(d);
    s.amax = zeros({3}).to(d);
    s.saturated = zeros({3}, TensorOptions(kInt64)).to(d);
    return s;
  };
  const Fp8LinearConfig config;
  const Tensor x = random_tensor({32, 64}, kFloat32, 3, -14, 14), w = random_tensor({48, 64}, kFloat32, 4, -0.2, 0.2);
  const Tensor b = random_tensor({48}, kBFloat16, 5), g = random_tensor({32, 48}, kBFloat16, 6, -3, 3);
  std::vector<std::vector<double>> results[2];
  Fp8LinearState states[2] = {make_state(Device::cpu()), make_state(gpu_device())};
  for (int d = 0; d < 2; ++d) {
    const Device dev = d == 0 ? Device::cpu() : gpu_device();
    Tensor xd = on(x, dev).set_requires_grad(true), wd = on(w, dev).set_requires_grad(true);
    Tensor bd = on(b, dev).set_requires_grad(true);
    Tensor y = fp8_linear(xd, wd, bd, states[d], config);
    y.backward(on(g, dev));
    for (const Tensor& t : {y, xd.grad(), wd.grad(), bd.grad()}) results[d].push_back(to_doubles(t.to(Device::cpu())));
  }
  // fp32 gradients: sums of exact products in another order, k ulps of sum |terms| apart at most
  // (terms up to about 0.6 for the input's, 42 for the weight's).
  const char* names[] = {"output", "input grad", "weight grad", "bias grad"};
  // The tensor cores' narrower partial sums (kTensorCoreAccumulatorBits): 4 roundings of 2^-14 over
  // the terms' magnitudes, relative to results of about their size.
  const Tolerance tols[] = {tolerance_for(kBFloat16), {1e-3, 1e-3, 1e-3}, {1e-3, 1e-3, 5e-2}, tolerance_for(kBFloat16)};
  for (size_t i = 0; i < 4; ++i) {
    const std::vector<double>& gpu = results[1][i];
    EXPECT_TRUE(all_close(from_vector<double>(gpu, {static_cast<int64_t>(gpu.size())}, TensorOptions(kFloat64)),
                          results[0][i], tols[i]))
        << names[i];
  }
  // The recorded statistics are the same numbers (max and counts do not depend on the order).
  EXPECT_EQ(to_doubles(states[1].amax.to(Device::cpu())), to_doubles(states[0].amax));
  EXPECT_EQ(to_doubles(states[1].saturated.to(Device::cpu())), to_doubles(states[0].saturated));
}

}  // namespace
}  // namespace mixtrain::testing
