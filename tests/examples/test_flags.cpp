// The example programs' flag reader: numbers are parsed whole, an unsigned flag refuses a
// negative value (once "--seed -1" became 2^64 - 1), and sizes with a minimum refuse 0 and
// negatives naming the flag (once "--heads 0" meant "use the preset" and "--layers -2" failed
// later with a width error).
#include <string>
#include <vector>

#include "common/flags.h"
#include "support/testing.h"

namespace ex = mixtrain::examples;
using mixtrain::testing::expect_error;

namespace {
// Reads the one flag of `args` with `read`.
template <class F>
void with_flag(std::vector<std::string> args, F&& read) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ex::FlagReader flags("prog", "usage\n", static_cast<int>(argv.size()), argv.data());
  std::string f;
  ASSERT_TRUE(flags.next(f));
  read(flags);
}
}  // namespace

TEST(ExampleFlags, UnsignedFlagsRefuseNegativeValues) {
  for (const char* v : {"-1", "-0", "-18446744073709551615"})
    expect_error([&] { with_flag({"--seed", v}, [](ex::FlagReader& r) { r.number<uint64_t>(); }); },
                 {"--seed", "negative"});
  with_flag({"--seed", "18446744073709551615"},
            [](ex::FlagReader& r) { EXPECT_EQ(r.number<uint64_t>(), 18446744073709551615ull); });
  expect_error([&] { with_flag({"--seed", "12x"}, [](ex::FlagReader& r) { r.number<uint64_t>(); }); }, "--seed");
}

TEST(ExampleFlags, SizesBelowTheirMinimumNameTheFlag) {
  for (const char* flag : {"--heads", "--context", "--width", "--layers"})
    for (const char* v : {"0", "-2", "-9223372036854775808"})
      expect_error([&] { with_flag({flag, v}, [](ex::FlagReader& r) { r.number<int64_t>(1); }); },
                   {flag, "must be >= 1", v});
  with_flag({"--heads", "4"}, [](ex::FlagReader& r) { EXPECT_EQ(r.number<int64_t>(1), 4); });
  // Signed flags without a minimum still read negatives.
  with_flag({"--lr", "-0.5"}, [](ex::FlagReader& r) { EXPECT_EQ(r.number<double>(), -0.5); });
}
