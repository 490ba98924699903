// mixtrain::data's readers: IDX (plain and gzip'd), Fashion-MNIST loading, CSV.
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <mixtrain/mixtrain.h>

#include "support/testing.h"

namespace mt = mixtrain;
namespace ex = mixtrain::data;
using mixtrain::testing::error_of;
using mixtrain::testing::expect_error;

namespace {

// The test process's scratch directory, removed when the process exits (ctest runs each test in
// a process of its own, so each had left one in the temporary folder).
struct ScratchDir {
  std::string path = ::testing::TempDir() + "mixtrain_data_test_" + std::to_string(::getpid());
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

std::string temp_path(const std::string& name) {
  static const ScratchDir dir;
  ::mkdir(dir.path.c_str(), 0755);
  return dir.path + "/" + name;
}

// An IDX image of unsigned bytes: magic 00 00 08 ndims, big-endian dims, then the data.
std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<uint8_t> counting(size_t n, uint8_t mul = 7) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * mul + 3);
  return v;
}

// A directory laid out as the Debian package's, holding n images per split.
std::string fake_fashion_dir(const std::string& name, uint32_t n, const std::vector<uint8_t>& labels) {
  const std::string dir = temp_path(name);
  ::mkdir(dir.c_str(), 0755);
  for (const char* split : {"train", "t10k"}) {
    write_gz(dir + "/" + split + "-images-idx3-ubyte.gz", idx_bytes({n, 28, 28}, counting(n * 784)));
    write_gz(dir + "/" + split + "-labels-idx1-ubyte.gz", idx_bytes({static_cast<uint32_t>(labels.size())}, labels));
  }
  return dir;
}

}  // namespace

TEST(Idx, ReadsGzipAndPlainFiles) {
  const auto data = counting(5 * 4 * 3);
  const std::string gz = temp_path("a.idx.gz"), plain = temp_path("a.idx");
  write_gz(gz, idx_bytes({5, 4, 3}, data));
  const auto raw = idx_bytes({5, 4, 3}, data);
  write_file(plain, std::string(raw.begin(), raw.end()));
  for (const auto& path : {gz, plain}) {
    const ex::IdxArray a = ex::read_idx(path);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{5, 4, 3}));
    EXPECT_EQ(a.data, data);
  }
}

TEST(Idx, RejectsBadFilesNamingThem) {
  const std::string path = temp_path("bad.idx.gz");
  write_gz(path, idx_bytes({10, 10}, counting(99)));
  expect_error([&] { (void)ex::read_idx(path); }, "truncated: dims [10, 10] need 100 data bytes, found 99");
  write_gz(path, idx_bytes({10}, counting(12)));
  expect_error([&] { (void)ex::read_idx(path); }, "has 2 bytes after the 10");
  auto bad_magic = idx_bytes({4}, counting(4));
  bad_magic[0] = 0x1f;
  write_gz(path, bad_magic);
  expect_error([&] { (void)ex::read_idx(path); }, "bad magic number");
  auto floats = idx_bytes({1}, counting(4));
  floats[2] = 0x0D;
  write_gz(path, floats);
  expect_error([&] { (void)ex::read_idx(path); }, "element type 0xd is not supported");
  write_gz(path, {0, 0, 8, 3, 0, 0});
  expect_error([&] { (void)ex::read_idx(path); }, "truncated inside its header");
  expect_error([&] { (void)ex::read_idx(temp_path("nope.gz")); }, "No such file");
}

TEST(Idx, TruncatedGzipStreamIsAnError) {
  const std::string path = temp_path("cut.idx.gz");
  write_gz(path, idx_bytes({64, 64}, counting(64 * 64, 13)));
  const std::string whole = read_file(path);
  write_file(path, whole.substr(0, whole.size() / 2));
  const std::string msg = error_of([&] { ex::read_idx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("corrupt or truncated") != std::string::npos || msg.find("is truncated") != std::string::npos)
      << msg;
}

TEST(FashionMnist, LoadsTheDebianLayout) {
  const std::vector<uint8_t> labels{3, 0, 9};
  const std::string dir = fake_fashion_dir("fashion_ok", 3, labels);
  const ex::TensorDataset d = ex::load_fashion_mnist(dir, false);
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.data().shape(), (mt::Shape{3, 784}));
  EXPECT_EQ(d.data().dtype(), mt::kFloat32);
  EXPECT_EQ(d.target().to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 9}));
  const auto pixels = counting(3 * 784);
  const auto x = d.data().to_vector<float>();
  for (size_t i : {size_t{0}, size_t{785}, size_t{3 * 784 - 1}}) EXPECT_FLOAT_EQ(x[i], pixels[i] / 255.0f);
  const ex::Example e = d.get(1);
  EXPECT_EQ(e.data.shape(), (mt::Shape{784}));
  EXPECT_FLOAT_EQ(e.data.to_vector<float>()[1], pixels[785] / 255.0f);
  EXPECT_EQ(e.target.item<int64_t>(), 0);
  expect_error([&] { (void)d.get(3); }, "index 3 is out of range for 3 examples");
}

TEST(FashionMnist, ErrorsSayWhatIsWrong) {
  expect_error([&] { (void)ex::load_fashion_mnist(temp_path("no_such_dir")); },
               "install the Debian package dataset-fashion-mnist");
  expect_error([&] { (void)ex::load_fashion_mnist(fake_fashion_dir("fashion_badlabel", 2, {1, 10})); },
               "label 10 at index 1");
  expect_error([&] { (void)ex::load_fashion_mnist(fake_fashion_dir("fashion_count", 2, {1, 2, 3})); },
               "holds dims [3] for 2 images");
  const std::string dir = fake_fashion_dir("fashion_missing", 1, {0});
  std::remove((dir + "/train-labels-idx1-ubyte.gz").c_str());
  expect_error([&] { (void)ex::load_fashion_mnist(dir); }, "train-labels-idx1-ubyte.gz not found; install");
}

TEST(FashionMnist, RealDatasetIfInstalled) {
  struct stat st {};
  if (::stat(ex::kFashionMnistDir, &st) != 0) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  // Fashion-MNIST (Xiao et al., 2017): 60,000 training and 10,000 test images of 28x28, ten
  // classes, balanced: 6,000 and 1,000 images of each.
  for (bool train : {true, false}) {
    const ex::TensorDataset d = ex::load_fashion_mnist(ex::kFashionMnistDir, train);
    EXPECT_EQ(d.size(), train ? 60000 : 10000);
    EXPECT_EQ(d.data().size(1), 784);
    std::vector<int64_t> per_class(10, 0);
    for (int64_t l : d.target().to_vector<int64_t>()) ++per_class[static_cast<size_t>(l)];
    EXPECT_EQ(per_class, std::vector<int64_t>(10, train ? 6000 : 1000));
    const auto x = d.data().to_vector<float>();
    EXPECT_GE(*std::min_element(x.begin(), x.end()), 0.0f);
    EXPECT_LE(*std::max_element(x.begin(), x.end()), 1.0f);
  }
}

TEST(Csv, ReadsFeaturesAndTarget) {
  const std::string path = temp_path("ok.csv");
  write_file(path, "\n\"x1\", y ,x2\r\n1.5,10,-2\r\n\n 3 , 2e1 ,4.25\n");
  const ex::CsvTable d = ex::read_csv(path, "y");
  EXPECT_EQ(d.features.shape(), (mt::Shape{2, 2}));
  EXPECT_EQ(d.feature_names, (std::vector<std::string>{"x1", "x2"}));
  EXPECT_EQ(d.features.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.0f, 4.25f}));
  EXPECT_EQ(d.target.to_vector<float>(), (std::vector<float>{10.0f, 20.0f}));
  EXPECT_EQ(d.dataset().size(), 2);
}

TEST(Csv, BadRowsNameTheLine) {
  const std::string path = temp_path("bad.csv");
  auto err = [&](const std::string& text, const std::string& target = "y") {
    write_file(path, text);
    return error_of([&] { ex::read_csv(path, target); });
  };
  EXPECT_NE(err("a,y\n1,2\n3\n").find("bad.csv:3: expected 2 fields, found 1"), std::string::npos);
  EXPECT_NE(err("a,y\n1,2\n3,4,\n").find(":3: expected 2 fields, found 3"), std::string::npos);
  EXPECT_NE(err("a,y\n\n1,abc\n").find(":3: field \"abc\" in column \"y\" is not a number"), std::string::npos);
  EXPECT_NE(err("a,y\n1,2x\n").find(":2: field \"2x\""), std::string::npos);
  EXPECT_NE(err("a,y\n,2\n").find(":2: empty field in column \"a\""), std::string::npos);
  EXPECT_NE(err("a,y\n1,1e400\n").find(":2: field \"1e400\" in column \"y\" is not a finite float"), std::string::npos);
  EXPECT_NE(err("a,y\n1,nan\n").find("not a finite float"), std::string::npos);
  EXPECT_NE(err("a,b\n1,2\n").find("no column \"y\" (columns: a, b)"), std::string::npos);
  EXPECT_NE(err("y\n1\n").find("no feature column"), std::string::npos);
  EXPECT_NE(err("a,y\n").find("no data rows"), std::string::npos);
  EXPECT_NE(err("\n\n").find("is empty"), std::string::npos);
  expect_error([&] { (void)ex::read_csv(temp_path("missing.csv"), "y"); }, "cannot open");
}
