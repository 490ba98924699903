// JSON depth is bounded before anything recurses into a document (parse, copy, compare, dump),
// and messages quote JSON only as a short excerpt.
#include <string>

#include "core/json_limits.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::testing::expect_error;

namespace {
std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }
}  // namespace

TEST(JsonLimits, DeepDocumentsAreRejectedWhileParsing) {
  for (size_t depth : {size_t{65}, size_t{1000}, size_t{100000}}) {
    expect_error([&] { mt::detail::parse_json_bounded(nested(depth), "doc"); }, {"doc", "deeper", "64"});
    expect_error([&] { mt::detail::parse_json_bounded("{\"a\":" + nested(depth) + "}", "doc"); }, "deeper");
  }
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"k\":";
  objects += "1" + std::string(100000, '}');
  expect_error([&] { mt::detail::parse_json_bounded(objects, "doc"); }, "deeper");
  EXPECT_EQ(mt::detail::parse_json_bounded(nested(64), "doc").dump(), nested(64));
  expect_error([] { mt::detail::parse_json_bounded("{\"a\": tru}", "doc"); }, {"doc", "not valid JSON"});
}

TEST(JsonLimits, DeepValuesInMemoryAreCheckedWithoutRecursion) {
  // Built by hand, not parsed: what a caller could hand to load_state_dict().
  nlohmann::json deep = nlohmann::json::array();
  nlohmann::json* p = &deep;
  for (int i = 0; i < 100000; ++i) {
    p->push_back(nlohmann::json::array());
    p = &(*p)[0];
  }
  expect_error([&] { mt::detail::check_json_depth(deep, "state"); }, {"state", "deeper"});
  EXPECT_EQ(mt::detail::json_excerpt(deep), "<array nested too deep to show>");
  mt::detail::check_json_depth(nlohmann::json::parse(nested(64)), "state");
  const std::string excerpt = mt::detail::json_excerpt(nlohmann::json(std::string(10000, 'x')));
  EXPECT_LE(excerpt.size(), 130u);
  EXPECT_EQ(excerpt.substr(excerpt.size() - 3), "...");
}
