// The fp8 dtypes and base/float8.h's scalar casts, bit for bit against PyTorch 2.15's CPU casts on
// every fp16 and bf16 bit pattern and on millions of generated fp32 values: first the test's own
// reference encoder (support/fp8_reference.h) is checked against PyTorch's results (CRC-32 of the
// outputs, spot values, amax and saturation counts from tests/core/data/fp8_torch_reference.json),
// then mixtrain's encoders against that reference, element by element, so a difference is named.
#include "support/fp8_reference.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace fp8 = mixtrain::testing::fp8;

namespace {

using fp8::cast_value;
using fp8::CaseView;
using fp8::hex_of;
using fp8::view;

}  // namespace

TEST(Float8, DTypeTable) {
  EXPECT_STREQ(mt::dtype_name(mt::kFloat8E4M3FN), "float8_e4m3fn");
  EXPECT_STREQ(mt::dtype_name(mt::kFloat8E5M2), "float8_e5m2");
  EXPECT_EQ(mt::element_size(mt::kFloat8E4M3FN), 1u);
  EXPECT_EQ(mt::element_size(mt::kFloat8E5M2), 1u);
  EXPECT_TRUE(mt::is_floating(mt::kFloat8E4M3FN) && mt::is_float8(mt::kFloat8E5M2));
  EXPECT_FALSE(mt::is_float8(mt::kBFloat16) || mt::is_half(mt::kFloat8E4M3FN));
  EXPECT_EQ(mt::dtype_from_name("float8_e4m3fn"), mt::kFloat8E4M3FN);
  EXPECT_EQ(mt::dtype_from_name("fp8_e5m2"), mt::kFloat8E5M2);
  EXPECT_EQ(mt::promote_types(mt::kFloat8E5M2, mt::kFloat8E5M2), mt::kFloat8E5M2);
  mt::testing::expect_error([] { mt::promote_types(mt::kFloat8E4M3FN, mt::kFloat32); },
                            {"promotion of float8 types", "float8_e4m3fn", "float32"});
  mt::testing::expect_error([] { mt::promote_types(mt::kFloat8E4M3FN, mt::kFloat8E5M2); }, {"float8_e5m2"});
}

TEST(Float8, TheIssuesFactsHold) {
  // docs/REFERENCE_AMP.md, "FP8", as measured on PyTorch 2.15's CPU casts.
  EXPECT_EQ(mt::float_to_e4m3fn_bits(1000.0f), 0x7e);
  EXPECT_EQ(mt::float_to_e4m3fn_bits(1e30f), 0x7e);
  EXPECT_EQ(mt::float_to_e4m3fn_bits(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(mt::float_to_e4m3fn_bits(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(mt::float_to_e5m2_bits(1e6f), 0x7c);
  EXPECT_EQ(mt::float_to_e5m2_bits(60000.0f), 0x7b);
  EXPECT_EQ(mt::float_to_e5m2_bits(1e6f, /*saturate=*/true), 0x7b);
  EXPECT_EQ(mt::float_to_e5m2_bits(-std::numeric_limits<float>::infinity(), true), 0xfb);
  EXPECT_EQ(static_cast<float>(mt::Float8E4M3FN::from_bits(0x7e)), 448.0f);
  EXPECT_EQ(static_cast<float>(mt::Float8E5M2::from_bits(0x7b)), 57344.0f);
  EXPECT_TRUE(std::isinf(static_cast<float>(mt::Float8E5M2::from_bits(0x7c))));
}

TEST(Float8, ReferenceEncoderReproducesPyTorch) {
  const nlohmann::json ref = fp8::load_torch_reference();
  ASSERT_TRUE(ref.contains("cases")) << "tests/core/data/fp8_torch_reference.json is missing or unreadable";
  ASSERT_GE(ref["cases"].size(), 19u);
  int64_t values = 0;
  for (const nlohmann::json& c : ref["cases"]) {
    const CaseView v = view(c);
    SCOPED_TRACE(v.name);
    const std::vector<uint64_t> inputs = fp8::case_inputs(c);
    ASSERT_EQ(static_cast<int64_t>(inputs.size()), c["count"].get<int64_t>());
    std::vector<uint8_t> out(inputs.size());
    float amax = 0.0f;
    int64_t saturated = 0;
    const float max = v.e5m2 ? 57344.0f : 448.0f;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const float x = fp8::source_value(v.source, inputs[i]), s = cast_value(v, inputs[i]);
      out[i] = fp8::reference_encode(s, v.e5m2, v.saturate);
      if (!std::isnan(x)) amax = std::max(amax, std::fabs(x));
      saturated += std::fabs(s) > max;
    }
    EXPECT_EQ(fp8::hex32(fp8::crc32(out.data(), out.size())), c["crc32"].get<std::string>());
    for (const nlohmann::json& spot : c["spots"]) {
      const uint64_t bits = std::stoull(spot[0].get<std::string>(), nullptr, 16);
      EXPECT_EQ(fp8::reference_encode(cast_value(v, bits), v.e5m2, v.saturate), spot[1].get<int>())
          << "input bits " << spot[0];
    }
    float want_amax;
    const uint32_t amax_bits = hex_of(c["amax_bits"]);
    std::memcpy(&want_amax, &amax_bits, 4);
    EXPECT_EQ(amax, want_amax);
    EXPECT_EQ(saturated, c["saturated"].get<int64_t>());
    values += static_cast<int64_t>(inputs.size());
  }
  EXPECT_GT(values, 20'000'000);  // "millions of values": the fp32 streams are 7M per format
}

TEST(Float8, ScalarEncodersMatchTheReferenceOnEveryCase) {
  const nlohmann::json ref = fp8::load_torch_reference();
  for (const nlohmann::json& c : ref["cases"]) {
    const CaseView v = view(c);
    SCOPED_TRACE(v.name);
    int64_t bad = 0;
    for (uint64_t bits : fp8::case_inputs(c)) {
      const float s = cast_value(v, bits);
      const uint8_t got = v.e5m2 ? mt::float_to_e5m2_bits(s, v.saturate) : mt::float_to_e4m3fn_bits(s);
      const uint8_t want = fp8::reference_encode(s, v.e5m2, v.saturate);
      if (got != want && bad++ < 5)
        ADD_FAILURE() << "input bits " << std::hex << bits << " (value " << s << "): got 0x" << int(got)
                      << ", expected 0x" << int(want) << std::dec;
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(Float8, DecodingMatchesPyTorchOnEveryByte) {
  const nlohmann::json ref = fp8::load_torch_reference();
  for (const char* format : {"float8_e4m3fn", "float8_e5m2"}) {
    SCOPED_TRACE(format);
    const bool e5m2 = std::string(format) == "float8_e5m2";
    const nlohmann::json& t = ref["decode"][format];
    for (int b = 0; b < 256; ++b) {
      const float f = e5m2 ? mt::e5m2_bits_to_float(static_cast<uint8_t>(b))
                           : mt::e4m3fn_bits_to_float(static_cast<uint8_t>(b));
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      EXPECT_EQ(bits, hex_of(t["float32"][b])) << "byte " << b;  // NaN payloads too
      // fp16 and bf16 through fp32: PyTorch's bits except NaN payloads, which follow mixtrain's
      // fp16/bf16 conversions (sign and top payload kept; PyTorch's bf16 writes 0x7fc0).
      const uint16_t h = mt::float_to_half_bits(f), bf = mt::float_to_bf16_bits(f);
      if (std::isnan(f)) {
        EXPECT_EQ(h & 0x7c00, 0x7c00) << "byte " << b;
        EXPECT_NE(h & 0x3ff, 0) << "byte " << b;
        EXPECT_EQ(h & 0x8000, hex_of(t["float16"][b]) & 0x8000) << "byte " << b;
        EXPECT_TRUE(std::isnan(mt::bf16_bits_to_float(bf))) << "byte " << b;
      } else {
        EXPECT_EQ(h, hex_of(t["float16"][b])) << "byte " << b;
        EXPECT_EQ(bf, hex_of(t["bfloat16"][b])) << "byte " << b;
      }
      // Every value is exact in fp16 and bf16, and casting it back gives its byte (NaN bytes give
      // the canonical NaN).
      if (!std::isnan(f)) {
        EXPECT_EQ(mt::half_bits_to_float(h), f);
        EXPECT_EQ(mt::bf16_bits_to_float(bf), f);
        const uint8_t back = e5m2 ? mt::float_to_e5m2_bits(f) : mt::float_to_e4m3fn_bits(f);
        EXPECT_EQ(back, b);
      }
    }
  }
}
