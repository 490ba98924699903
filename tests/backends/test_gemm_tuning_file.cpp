// The GEMM tuning table's file (backends/gemm_tuning_file.h): what is written reads back, and a
// file that is not a table is refused whole, naming the path and the fault.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "backends/gemm_tuning_file.h"
#include "mixtrain/base/error.h"

namespace mixtrain::testing {
namespace {

namespace fs = std::filesystem;

class GemmTuningFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "mt_gemm_tuning_XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  void write(const std::string& p, const std::string& text) const { std::ofstream(p) << text; }

  std::string dir_;
};

TEST_F(GemmTuningFile, WhatIsWrittenReadsBackAndNoTemporaryIsLeft) {
  backends::GemmTuningTable t;
  t.device = "NVIDIA H200";
  t.library_version = 130001;
  t.choices = {{"2,0,0,8192,8192,8192,1,8192,8192,0,0,-1,0,0,0,16,16,16", 3}, {"1,1,0,7,5,3,1,3,3,0,0,-1,0,1,0,4,2,8", 0}};
  const std::string p = path("table.json");
  backends::write_gemm_tuning(p, t);
  const backends::GemmTuningTable back = backends::read_gemm_tuning(p);
  EXPECT_EQ(back.device, t.device);
  EXPECT_EQ(back.library_version, t.library_version);
  EXPECT_EQ(back.choices, t.choices);
  // A second save replaces the first whole.
  t.choices.erase(t.choices.begin());
  backends::write_gemm_tuning(p, t);
  EXPECT_EQ(backends::read_gemm_tuning(p).choices, t.choices);
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename(), "table.json") << "left behind: " << entry.path();
}

TEST_F(GemmTuningFile, FilesThatAreNotTablesAreRefusedNamingPathAndFault) {
  const std::string good_head = R"({"format": "mixtrain-gemm-tuning", "version": 1, "device": "d", "library_version": 1, )";
  const std::pair<std::string, std::string> cases[] = {
      {"not json {", "JSON"},
      {"[1, 2]", "object"},
      {R"({"format": "other", "version": 1, "device": "d", "library_version": 1, "choices": {}})", "format"},
      {R"({"format": "mixtrain-gemm-tuning", "version": 9, "device": "d", "library_version": 1, "choices": {}})",
       "version"},
      {R"({"format": "mixtrain-gemm-tuning", "version": 1, "library_version": 1, "choices": {}})", "device"},
      {good_head + R"("choices": [1]})", "choices"},
      {good_head + R"("choices": {"a": -1}})", "\"a\""},
      {good_head + R"("choices": {"a": 1, "b": "x"}})", "\"b\""},
      {good_head + R"("choices": {"a": 1.5}})", "\"a\""},
      {good_head + R"("choices": {"": 1}})", "key"},
  };
  int i = 0;
  for (const auto& [text, fault] : cases) {
    const std::string p = path("bad" + std::to_string(i++) + ".json");
    write(p, text);
    try {
      backends::read_gemm_tuning(p);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(p), std::string::npos) << what;
      EXPECT_NE(what.find(fault), std::string::npos) << "expected '" << fault << "' in: " << what;
    }
  }
  EXPECT_THROW(backends::read_gemm_tuning(path("missing.json")), Error);
  EXPECT_THROW(backends::read_gemm_tuning(dir_), Error);  // a directory is not a file
}

TEST_F(GemmTuningFile, AnUnwritablePlaceIsAnErrorNamingIt) {
  backends::GemmTuningTable t;
  const std::string p = path("no/such/dir/table.json");
  try {
    backends::write_gemm_tuning(p, t);
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// A table the reader would refuse is not written, and nothing is left behind: a device name
// that is not UTF-8 once escaped as nlohmann's type_error and left the temporary file.
TEST_F(GemmTuningFile, WhatTheReaderWouldRefuseIsNotWrittenAndLeavesNothing) {
  const std::string p = path("table.json");
  backends::GemmTuningTable t;
  t.device = std::string("GPU \xff\xfe");
  t.choices = {{"k", 1}};
  const auto refused = [&](const char* fault) {
    try {
      backends::write_gemm_tuning(p, t);
      ADD_FAILURE() << "wrote it";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fault), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::is_empty(dir_)) << "a file was left in " << dir_;
  };
  refused("UTF-8");
  t.device = "d";
  t.choices = {{"k", -1}};
  refused("index");
  t.choices = {{"bad\nkey", 1}};
  refused("printable");
}

}  // namespace
}  // namespace mixtrain::testing
