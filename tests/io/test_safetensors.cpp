// safetensors: the byte layout of written files, files written by hand as the reference
// implementation lays them out, round trips of every dtype, and rejection of truncated, edited
// and malformed files.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;

namespace {

std::string le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// A file from a header text and data bytes, as the format defines it (no padding added).
std::string make_file(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The parser rejects bytes with an error naming the file and containing text.
void expect_rejected(const std::string& bytes, const std::string& text) {
  mt::testing::expect_error([&] { mt::io::parse_safetensors(bytes, "test.safetensors"); }, {text, "test.safetensors"});
}

mt::io::NamedTensors sample() {
  return {{"b", mt::from_vector(std::vector<float>{1, 2, 3}, {3}, mt::kFloat16)},
          {"a", mt::from_vector(std::vector<float>{1.5f, -2, 3.25f, 4}, {2, 2})},
          {"c", mt::from_vector(std::vector<int64_t>{-7, 1LL << 40}, {2})},
          {"d", mt::from_vector(std::vector<float>{1, 0, 1}, {3}, mt::kBool)},
          {"e", mt::from_vector(std::vector<float>{-0.5f}, {1}, mt::kBFloat16)},
          {"f", mt::from_vector(std::vector<double>{3.141592653589793}, {})},
          {"g", mt::from_vector(std::vector<int32_t>{5, -6}, {2})}};
}

}  // namespace

TEST(Safetensors, HeaderLayoutByteByByte) {
  const std::string bytes = mt::io::serialize_safetensors(sample(), {{"format", "pt"}});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ(n % 8, 0u);  // data starts 8-byte aligned
  EXPECT_EQ(bytes[8], '{');
  const std::string header = bytes.substr(8, n);
  const size_t end = header.find_last_not_of(' ');
  EXPECT_EQ(header[end], '}');
  EXPECT_LT(header.size() - end - 1, 8u);  // at most 7 padding spaces
  const nlohmann::json h = nlohmann::json::parse(header.substr(0, end + 1));
  // Largest element size first, then by name: c (I64), f (F64), a (F32), g (I32), b (F16), e (BF16), d (BOOL).
  const nlohmann::json want = nlohmann::json::parse(R"({
    "c": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]},
    "f": {"dtype": "F64", "shape": [], "data_offsets": [16, 24]},
    "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [24, 40]},
    "g": {"dtype": "I32", "shape": [2], "data_offsets": [40, 48]},
    "b": {"dtype": "F16", "shape": [3], "data_offsets": [48, 54]},
    "e": {"dtype": "BF16", "shape": [1], "data_offsets": [54, 56]},
    "d": {"dtype": "BOOL", "shape": [3], "data_offsets": [56, 59]},
    "__metadata__": {"format": "pt"}})");
  EXPECT_EQ(h, want);
  ASSERT_EQ(bytes.size(), 8 + n + 59);
  const std::string data = bytes.substr(8 + n);
  EXPECT_EQ(data.substr(0, 16), raw(std::vector<int64_t>{-7, 1LL << 40}));
  EXPECT_EQ(data.substr(16, 8), raw(std::vector<double>{3.141592653589793}));
  EXPECT_EQ(data.substr(24, 16), raw(std::vector<float>{1.5f, -2, 3.25f, 4}));
  EXPECT_EQ(data.substr(40, 8), raw(std::vector<int32_t>{5, -6}));
  EXPECT_EQ(data.substr(48, 6), std::string("\x00\x3c\x00\x40\x00\x42", 6));  // fp16 1, 2, 3 little-endian
  EXPECT_EQ(data.substr(54, 2), std::string("\x00\xbf", 2));                  // bf16 -0.5
  EXPECT_EQ(data.substr(56, 3), std::string("\x01\x00\x01", 3));
}

TEST(Safetensors, ReadsAFileLaidOutByHand) {
  // What the reference writer produces for {"x": [1.0, -2.0] F32, "y": int64 [[3]]}.
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},"y":{"dtype":"I64","shape":[1,1],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const auto f = mt::io::parse_safetensors(make_file(header, raw(std::vector<int64_t>{3}) + raw(std::vector<float>{1, -2})));
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "y");
  EXPECT_EQ(f.tensors[0].second.shape(), (mt::Shape{1, 1}));
  EXPECT_EQ(f.tensors[0].second.item<int64_t>(), 3);
  EXPECT_EQ(f.tensors[1].first, "x");
  EXPECT_EQ(f.tensors[1].second.to_vector<float>(), (std::vector<float>{1, -2}));
  EXPECT_TRUE(f.metadata.empty());
}

TEST(Safetensors, RoundTripEveryDtypeBitExactThroughAFile) {
  mt::io::NamedTensors in = sample();
  in.emplace_back("big", mt::testing::random_tensor({64, 33}, mt::kFloat32, 3).t());  // non-contiguous
  in.emplace_back("empty", mt::zeros({0, 4}));
  const auto dir = std::filesystem::temp_directory_path() / ("mt_st_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "w.safetensors").string();
  mt::io::save_safetensors(path, in, {{"k", "v"}});
  EXPECT_FALSE(std::filesystem::exists(path + ".mixtrain-tmp"));
  const auto out = mt::io::load_safetensors(path);
  EXPECT_EQ(out.metadata.at("k"), "v");
  ASSERT_EQ(out.tensors.size(), in.size());
  for (const auto& [name, t] : in) {
    bool found = false;
    for (const auto& [n2, t2] : out.tensors) {
      if (n2 != name) continue;
      found = true;
      EXPECT_EQ(t2.dtype(), t.dtype()) << name;
      EXPECT_EQ(t2.shape(), t.shape()) << name;
      Tensor c = t.contiguous();
      EXPECT_EQ(std::memcmp(c.raw_data(), t2.raw_data(), c.nbytes()), 0) << name;
    }
    EXPECT_TRUE(found) << name;
  }
  std::filesystem::remove_all(dir);
  EXPECT_THROW(mt::io::load_safetensors((dir / "missing").string()), mt::Error);
}

TEST(Safetensors, EveryTruncationIsRejected) {
  const std::string bytes = mt::io::serialize_safetensors(sample());
  for (size_t len = 0; len < bytes.size(); ++len) {
    SCOPED_TRACE("length " + std::to_string(len));
    EXPECT_THROW(mt::io::parse_safetensors(bytes.substr(0, len)), mt::Error);
  }
  expect_rejected(bytes.substr(0, 5), "too few");
  expect_rejected(bytes.substr(0, 20), "truncated");
  expect_rejected(bytes.substr(0, bytes.size() - 1), "truncated");
  expect_rejected(bytes + "x", "trailing bytes");
}

TEST(Safetensors, MalformedHeadersAreRejected) {
  const std::string f4 = raw(std::vector<float>{1, 2});
  auto one = [&](const std::string& entry) { return make_file("{\"t\":" + entry + "}", f4); };
  expect_rejected(le64(1ull << 40) + "{}", "limit");
  expect_rejected(make_file("[1, 2]", ""), "must be a JSON object");
  expect_rejected(make_file("{\"t\": ", f4), "not valid JSON");
  expect_rejected(one(R"({"dtype":"U8","shape":[8],"data_offsets":[0,8]})"), "unsupported dtype \"U8\"");
  expect_rejected(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), "need 12");
  expect_rejected(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), "non-negative");
  expect_rejected(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), "end before they begin");
  expect_rejected(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1})"), "exactly dtype, shape");
  expect_rejected(one(R"({"dtype":"F32","shape":[2]})"), "exactly dtype, shape");
  expect_rejected(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), "run past the data");
  expect_rejected(make_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"u":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", f4),
                  "overlaps");
  expect_rejected(make_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f4), "gap of 4 bytes");
  expect_rejected(make_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f4),
                  "names \"t\" twice");
  expect_rejected(make_file(R"({"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2)),
                  "BOOL byte");
  expect_rejected(make_file(R"({"__metadata__":{"n":1},"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f4),
                  "__metadata__.n must be a string");
  EXPECT_THROW(mt::io::serialize_safetensors({{"x", mt::zeros({1})}, {"x", mt::zeros({1})}}), mt::Error);
  EXPECT_THROW(mt::io::serialize_safetensors({{"", mt::zeros({1})}}), mt::Error);
}
