// The README's training loops are the program examples/readme/amp_loop.cpp runs (the test
// examples.readme_amp_loop): every README block marked "<!-- examples/readme/amp_loop.cpp:NAME -->"
// is, word for word, that file's region "readme:NAME", and every region is quoted.
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "support/testing.h"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "readme:NAME begin" .. "readme:NAME end" regions of the source, indentation of the begin line
// removed from every line.
std::map<std::string, std::string> regions(const std::string& source) {
  std::map<std::string, std::string> out;
  std::istringstream lines(source);
  std::string line, name, text;
  size_t indent = 0;
  const std::string tag = "// readme:";
  while (std::getline(lines, line)) {
    const size_t at = line.find(tag);
    if (at != std::string::npos) {
      const std::string rest = line.substr(at + tag.size());
      const size_t space = rest.find(' ');
      if (rest.substr(space + 1) == "begin") {
        name = rest.substr(0, space);
        indent = at;
        text.clear();
      } else {
        EXPECT_EQ(rest.substr(0, space), name) << line;
        out[name] = text;
        name.clear();
      }
      continue;
    }
    if (!name.empty()) text += (line.size() >= indent ? line.substr(indent) : std::string()) + "\n";
  }
  return out;
}

// The ```cpp blocks that follow "<!-- FILE:NAME -->" in the README, by NAME.
std::map<std::string, std::string> quoted(const std::string& readme, const std::string& file) {
  std::map<std::string, std::string> out;
  const std::string marker = "<!-- " + file + ":";
  for (size_t at = readme.find(marker); at != std::string::npos; at = readme.find(marker, at + 1)) {
    const size_t name_end = readme.find(" -->", at);
    const std::string name = readme.substr(at + marker.size(), name_end - at - marker.size());
    const std::string open = "\n```cpp\n";
    EXPECT_EQ(readme.compare(name_end + 4, open.size(), open), 0) << "no ```cpp block right after " << name;
    const size_t begin = name_end + 4 + open.size(), end = readme.find("```\n", begin);
    out[name] = readme.substr(begin, end - begin);
  }
  return out;
}

}  // namespace

TEST(Readme, TrainingLoopsAreTheTestedProgramsText) {
  const std::string file = "examples/readme/amp_loop.cpp";
  const auto in_source = regions(slurp(std::string(MT_SOURCE_DIR) + "/" + file));
  const auto in_readme = quoted(slurp(std::string(MT_SOURCE_DIR) + "/README.md"), file);
  ASSERT_EQ(in_source.size(), 3u);  // fp16, accumulate, bf16
  EXPECT_EQ(in_readme.size(), in_source.size());
  for (const auto& [name, text] : in_source) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(in_readme.count(name)) << "README.md does not quote " << file << ":" << name;
    EXPECT_EQ(in_readme.at(name), text);
    EXPECT_GT(text.size(), 100u);
  }
}
