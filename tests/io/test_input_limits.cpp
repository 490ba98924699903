// Loaders under hostile input: byte counts that wrap, deep JSON, files that are not regular
// files, lenient corners of the safetensors header, errors that name the file, and the rule that
// whatever save_checkpoint writes load_checkpoint accepts (the writer checks with the reader's
// rules before it replaces anything).
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace fs = std::filesystem;
using mt::Tensor;
using mt::testing::expect_error;

namespace {

std::string le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}
std::string make_file(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "mt_limits_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
};
void write_bytes(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
std::string deep(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A model, an optimizer with state and a scaler, small enough for many saves.
struct Rig {
  mt::io::NamedTensors model;
  std::unique_ptr<mt::optim::Adam> opt;
  std::unique_ptr<mt::amp::GradScaler> scaler;
  explicit Rig(mt::amp::GradScalerOptions so = mt::amp::GradScalerOptions()) {
    model = {{"w", mt::full({4}, 0.5).set_requires_grad(true)}};
    opt = std::make_unique<mt::optim::Adam>(std::vector<Tensor>{model[0].second}, mt::optim::AdamOptions(1e-2));
    scaler = std::make_unique<mt::amp::GradScaler>(so);
  }
  // One iteration whose gradient is `g` everywhere (inf: an overflow the scaler skips).
  void iterate(float g) {
    opt->zero_grad();
    Tensor loss = (model[0].second * mt::full({4}, g)).sum();
    scaler->scale(loss).backward();
    scaler->step(*opt);
    scaler->update();
  }
};

}  // namespace

TEST(InputLimits, SafetensorsShapesWhoseBytesWrapAreRejected) {
  const std::string four(4, '\0');
  // The issue's file: 2^62 + 1 F32 elements is 2^64 + 4 bytes, 4 after wrapping.
  const std::string issue = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387905],\"data_offsets\":[0,4]}}";
  expect_error([&] { mt::io::parse_safetensors(make_file(issue, four), "x.safetensors"); },
               {"x.safetensors", "tensor \"a\"", "bytes"});
  // Other wraps: products of several sizes, to 0 bytes, and I64 elements.
  for (const std::string shape : {"[4294967296,4294967296]", "[4611686018427387904,4]", "[2,9223372036854775807]",
                                  "[18446744073709551615]", "[65536,65536,0,1]"}) {
    for (const std::string dt : {"F32", "I64", "BOOL"}) {
      const std::string h = "{\"t\":{\"dtype\":\"" + dt + "\",\"shape\":" + shape + ",\"data_offsets\":[0,0]}}";
      const std::string msg = mt::testing::error_of([&] { mt::io::parse_safetensors(make_file(h, ""), "y"); });
      if (shape.find(",0,") != std::string::npos) {
        EXPECT_EQ(msg, mt::testing::kNoError) << shape;  // zero elements: a valid empty tensor
      } else {
        EXPECT_NE(msg.find("tensor \"t\""), std::string::npos) << shape << " " << dt << ": " << msg;
      }
    }
  }
}

TEST(InputLimits, SafetensorsHeaderCornersAreRejected) {
  const std::string t = "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
  const std::string data(4, '\0');
  // Deep JSON: rejected while parsing, not by a stack overflow in a message.
  for (size_t depth : {size_t{70}, size_t{100000}}) {
    expect_error([&] { mt::io::parse_safetensors(make_file("{" + t + ",\"x\":" + deep(depth) + "}", data), "d"); },
                 {"deeper", "64"});
    expect_error([&] {
      mt::io::parse_safetensors(make_file("{\"__metadata__\":{\"k\":" + deep(depth) + "}," + t + "}", data), "d");
    }, "deeper");
  }
  // Bytes after a NUL were once ignored (the JSON parser stops at a NUL).
  expect_error([&] { mt::io::parse_safetensors(make_file("{" + t + std::string("}\0garbage", 9), data), "n"); }, "NUL");
  expect_error([&] { mt::io::parse_safetensors(make_file("{" + t + std::string("}   \0   ", 8), data), "n"); }, "NUL");
  expect_error([&] { mt::io::parse_safetensors(make_file("{" + t + "}" + std::string(8, '\0'), data), "n"); }, "NUL");
  // Space padding, as the format (and Python's safetensors) writes it, stays accepted.
  EXPECT_EQ(mt::io::parse_safetensors(make_file("{" + t + "}" + std::string(7, ' '), data), "p").tensors.size(), 1u);
  // An empty name, which the writer refuses.
  expect_error([&] {
    mt::io::parse_safetensors(make_file("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data), "e");
  }, "empty name");
  // A huge value in a message is cut, not dumped whole.
  const std::string big = "{\"t\":{\"dtype\":\"F32\",\"shape\":[" + std::string(100000, '1') + "],\"data_offsets\":[0,4]}}";
  const std::string msg = mt::testing::error_of([&] { mt::io::parse_safetensors(make_file(big, data), "b"); });
  EXPECT_NE(msg, mt::testing::kNoError);
  EXPECT_LT(msg.size(), 2000u);
}

TEST(InputLimits, NonRegularFilesAreRefusedBeforeReading) {
  TempDir tmp;
  const fs::path fifo = tmp.path / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Each of these once read forever (/dev/zero), blocked (a FIFO) or threw a std:: exception.
  for (const std::string p : {std::string("/dev/zero"), fifo.string(), tmp.path.string()}) {
    SCOPED_TRACE(p);
    expect_error([&] { mt::io::load_safetensors(p); }, {p, "not a regular file"});
    expect_error([&] { mt::amp::load_policy_table_file(p); }, {p, "not a regular file", "nothing was applied"});
  }
  expect_error([&] { mt::io::load_safetensors((tmp.path / "absent").string()); }, {"absent", "cannot open"});
  // A header length past the file's size is refused before anything that large is allocated.
  write_bytes(tmp.path / "short.safetensors", le64(90u * 1000u * 1000u) + "{}");
  expect_error([&] { mt::io::load_safetensors((tmp.path / "short.safetensors").string()); }, "runs past the end");
}

TEST(InputLimits, SafetensorsFilesLoadIntoFreshTensorsAndSavesRefuseDirectories) {
  TempDir tmp;
  const fs::path f = tmp.path / "a.safetensors";
  mt::io::save_safetensors(f.string(), {{"x", mt::arange(0, 6).reshape({2, 3})}, {"b", mt::ones({2}, mt::kBool)}});
  const auto loaded = mt::io::load_safetensors(f.string());
  ASSERT_EQ(loaded.tensors.size(), 2u);
  EXPECT_EQ(loaded.tensors[0].second.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  // save_safetensors onto a directory once threw std::filesystem_error.
  expect_error([&] { mt::io::save_safetensors(tmp.path.string(), {{"x", mt::ones({1})}}); },
               {tmp.path.string(), "is a directory"});
  EXPECT_TRUE(fs::is_directory(tmp.path));
  // A BOOL byte other than 0/1 and a truncated file are rejected by the streaming reader too.
  std::string bytes = read_bytes(f);
  bytes.back() = 7;
  write_bytes(f, bytes);
  expect_error([&] { mt::io::load_safetensors(f.string()); }, "BOOL byte");
  write_bytes(f, bytes.substr(0, bytes.size() - 1));
  expect_error([&] { mt::io::load_safetensors(f.string()); }, "truncated");
}

TEST(InputLimits, PolicyFilesAreBoundedAndNamed) {
  TempDir tmp;
  const fs::path p = tmp.path / "policy.json";
  const auto before = mt::amp::policy_table_to_json();
  write_bytes(p, "{\"matmul\": " + deep(100000) + "}");
  expect_error([&] { mt::amp::load_policy_table_file(p.string()); }, {p.string(), "deeper", "nothing was applied"});
  write_bytes(p, "{\"matmul\": [\"" + std::string(10000, 'x') + "\"]}");
  const std::string msg = mt::testing::error_of([&] { mt::amp::load_policy_table_file(p.string()); });
  EXPECT_NE(msg.find("must be a string"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 1000u);
  nlohmann::json table = nlohmann::json::object();
  mt::testing::nest_arrays_into(table["matmul"], 100000);
  expect_error([&] { mt::amp::load_policy_table(table); }, "deeper");
  EXPECT_EQ(mt::amp::policy_table_to_json(), before);
}

TEST(InputLimits, DeepJsonInACheckpointIsRejectedWithNothingLoaded) {
  TempDir tmp;
  Rig s;
  s.iterate(1.0f);
  const fs::path dir = tmp.path / "ckpt";
  mt::io::save_checkpoint(dir.string(), s.model, *s.opt, *s.scaler, 1, {{"note", "ok"}});
  // A deep "extra" is refused by the writer, before the good checkpoint is touched.
  nlohmann::json extra = nlohmann::json::object();
  mt::testing::nest_arrays_into(extra["x"], 100000);
  const std::string trainer = read_bytes(dir / "trainer.json");
  expect_error([&] { mt::io::save_checkpoint(dir.string(), s.model, *s.opt, *s.scaler, 2, extra); },
               {"save_checkpoint", "deeper"});
  EXPECT_EQ(read_bytes(dir / "trainer.json"), trainer);
  // An edited trainer.json with a deep field is rejected by the reader.
  std::string edited = trainer;
  edited.replace(edited.find("\"ok\""), 4, deep(100000));
  write_bytes(dir / "trainer.json", edited);
  Rig other;
  const std::vector<float> w = other.model[0].second.to_vector<float>();
  expect_error([&] { mt::io::load_checkpoint(dir.string(), other.model, *other.opt, *other.scaler); },
               {"trainer.json", "deeper"});
  EXPECT_EQ(other.model[0].second.to_vector<float>(), w);
  EXPECT_TRUE(other.opt->state_tensors().empty());
}

TEST(InputLimits, WhateverSaveWritesLoadAccepts) {
  // A run of overflows with no floor (min_scale 0, a steep backoff) drives the scale towards 0.
  // Either the scaler keeps a state its loader accepts (then the checkpoint round-trips) or the
  // save is refused and the previous checkpoint stays as it was; never a checkpoint that saves
  // but cannot load.
  TempDir tmp;
  Rig s(mt::amp::GradScalerOptions().init_scale(65536).backoff_factor(1e-3).min_scale(0));
  s.iterate(1.0f);
  const fs::path dir = tmp.path / "ckpt";
  mt::io::save_checkpoint(dir.string(), s.model, *s.opt, *s.scaler, 1);
  std::string good_model = read_bytes(dir / "model.safetensors"), good_trainer = read_bytes(dir / "trainer.json");
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    s.iterate(INFINITY);
    const std::string err = mt::testing::error_of(
        [&] { mt::io::save_checkpoint(dir.string(), s.model, *s.opt, *s.scaler, 2 + i); });
    if (err == mt::testing::kNoError) {
      good_model = read_bytes(dir / "model.safetensors");
      good_trainer = read_bytes(dir / "trainer.json");
    }
    if (err != mt::testing::kNoError) {
      ++refused;
      EXPECT_NE(err.find("load_checkpoint would reject"), std::string::npos) << err;
      EXPECT_NE(err.find("scale"), std::string::npos) << err;
      EXPECT_EQ(read_bytes(dir / "trainer.json"), good_trainer);
      EXPECT_EQ(read_bytes(dir / "model.safetensors"), good_model);
      EXPECT_FALSE(fs::exists(tmp.path / "ckpt.mixtrain-tmp"));
    } else {
      Rig fresh;
      EXPECT_EQ(mt::io::load_checkpoint(dir.string(), fresh.model, *fresh.opt, *fresh.scaler), 2 + i);
      EXPECT_EQ(fresh.scaler->get_scale(), s.scaler->get_scale());
    }
  }
  std::printf("scale after 40 overflows: %g; saves refused: %d\n", s.scaler->get_scale(), refused);
  // Whatever happened, the directory holds a checkpoint that loads.
  Rig fresh;
  EXPECT_GE(mt::io::load_checkpoint(dir.string(), fresh.model, *fresh.opt, *fresh.scaler), 1);
}

TEST(InputLimits, CrcMismatchSaysWhatHappened) {
  TempDir tmp;
  Rig a, b;
  a.iterate(1.0f);
  b.iterate(2.0f);
  {
    mt::NoGradGuard no_grad;
    b.model[0].second.fill_(0.125);  // same size as a's, other bytes
  }
  mt::io::save_checkpoint((tmp.path / "a").string(), a.model, *a.opt, *a.scaler, 1);
  mt::io::save_checkpoint((tmp.path / "b").string(), b.model, *b.opt, *b.scaler, 1);
  // Same size, other bytes: what a reader sees when a file comes from another save.
  fs::copy_file(tmp.path / "b" / "model.safetensors", tmp.path / "a" / "model.safetensors",
                fs::copy_options::overwrite_existing);
  Rig c;
  expect_error([&] { mt::io::load_checkpoint((tmp.path / "a").string(), c.model, *c.opt, *c.scaler); },
               {"model.safetensors", "CRC-32", "edited or corrupted", "another process"});
}

TEST(InputLimits, StaleTemporariesAreRemovedAtTheNextStart) {
  TempDir tmp;
  Rig s;
  s.iterate(1.0f);
  const fs::path dir = tmp.path / "ckpt";
  mt::io::save_checkpoint(dir.string(), s.model, *s.opt, *s.scaler, 1);
  // What a crash leaves: a staging directory nobody holds, and a fallback copy beside a
  // complete checkpoint.
  fs::copy(dir, tmp.path / "ckpt.mixtrain-tmp");
  fs::copy(dir, tmp.path / "ckpt.mixtrain-old");
  Rig fresh;
  mt::io::load_checkpoint(dir.string(), fresh.model, *fresh.opt, *fresh.scaler);
  EXPECT_FALSE(fs::exists(tmp.path / "ckpt.mixtrain-tmp"));
  mt::io::save_checkpoint(dir.string(), s.model, *s.opt, *s.scaler, 2);
  EXPECT_FALSE(fs::exists(tmp.path / "ckpt.mixtrain-old"));
  EXPECT_FALSE(fs::exists(tmp.path / "ckpt.mixtrain-tmp"));
  // With <dir> missing the fallback copy is the checkpoint: loaded, and kept.
  fs::rename(dir, tmp.path / "ckpt.mixtrain-old");
  EXPECT_EQ(mt::io::load_checkpoint(dir.string(), fresh.model, *fresh.opt, *fresh.scaler), 2);
  EXPECT_TRUE(fs::exists(tmp.path / "ckpt.mixtrain-old"));
}
