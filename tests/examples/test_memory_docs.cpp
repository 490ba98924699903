// The `mixtrain memory` output the README and docs/MEMORY.md show is the program's: every block
// that follows a "<!-- output of `mixtrain ARGS` -->" marker is run (`mixtrain ARGS`) and the
// block, after its "$ mixtrain ARGS" line, must be the first lines of what the command prints
// today (up to a last line "..." where the block leaves the rest out). Wall times ("12.3 ms")
// vary from run to run and are compared as "N ms".
#include <regex>
#include <sstream>
#include <vector>

#include "cli_run.h"
#include "support/testing.h"

namespace {

using mixtrain::testing::run_mixtrain;
using mixtrain::testing::slurp;

std::vector<std::string> lines_of(const std::string& text) {
  static const std::regex kMillis("[0-9]+(\\.[0-9]+)? ms");
  std::vector<std::string> out;
  std::istringstream in(std::regex_replace(text, kMillis, "N ms"));
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

struct Quoted {
  std::string args, block;
};

std::vector<Quoted> quoted_outputs(const std::string& doc) {
  std::vector<Quoted> out;
  const std::string marker = "<!-- output of `mixtrain ";
  for (size_t at = doc.find(marker); at != std::string::npos; at = doc.find(marker, at + 1)) {
    const size_t args_end = doc.find("` -->", at);
    Quoted q;
    q.args = doc.substr(at + marker.size(), args_end - at - marker.size());
    const size_t begin = doc.find("```\n", args_end) + 4, end = doc.find("```\n", begin);
    q.block = doc.substr(begin, end - begin);
    out.push_back(q);
  }
  return out;
}

}  // namespace

TEST(MemoryDocs, QuotedOutputsAreWhatTheCommandPrints) {
  size_t checked = 0;
  for (const char* file : {"README.md", "docs/MEMORY.md"}) {
    const std::string doc = slurp(std::string(MT_SOURCE_DIR) + "/" + file);
    const std::vector<Quoted> blocks = quoted_outputs(doc);
    EXPECT_FALSE(blocks.empty()) << file << " quotes no marked `mixtrain memory` output";
    for (const Quoted& q : blocks) {
      SCOPED_TRACE(std::string(file) + ": mixtrain " + q.args);
      const std::vector<std::string> quoted = lines_of(q.block);
      ASSERT_GE(quoted.size(), 2u);
      EXPECT_EQ(quoted[0], "$ mixtrain " + q.args) << "the block must start with the command it quotes";
      const mixtrain::testing::CliRun r = run_mixtrain(q.args);
      ASSERT_EQ(r.code, 0) << r.err;
      const std::vector<std::string> printed = lines_of(r.out);
      ASSERT_GE(printed.size(), quoted.size() - 1) << r.out;
      for (size_t i = 1; i < quoted.size(); ++i) {
        if (quoted[i].find_first_not_of(' ') != std::string::npos && quoted[i].substr(quoted[i].find_first_not_of(' ')) == "...") {
          EXPECT_EQ(i + 1, quoted.size()) << "\"...\" ends a block";
          break;
        }
        EXPECT_EQ(quoted[i], printed[i - 1]) << "line " << i << " of the block";
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 3u);
}
