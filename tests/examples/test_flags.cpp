// The command-line parser the example programs and the `mixtrain` tool share (common/cli.h):
// numbers are parsed whole, an unsigned flag refuses a negative value (once "--seed -1" became
// 2^64 - 1), sizes with a minimum refuse 0 and negatives naming the flag (once "--heads 0" meant
// "use the preset"), unknown flags are named, and --help lists every flag with its default.
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "mlp/mlp_trainer.h"
#include "support/testing.h"

namespace ex = mixtrain::examples;
namespace tr = mixtrain::train;
namespace cli = mixtrain::examples::cli;

namespace {

// An app with the trainers' run flags on `c` plus a size flag with a minimum.
struct TestApp {
  ex::MlpConfig c;
  int64_t heads = 4;
  std::unique_ptr<CLI::App> app = cli::make_app("prog", "a test program");
  TestApp() {
    app->add_option("--heads", heads, "attention heads")->check(cli::integer_at_least(1))->type_name("N");
    cli::add_run_flags(*app, c);
  }
  bool parse(const std::vector<std::string>& args, std::ostream& help) { return cli::parse(*app, args, help); }
  bool parse(const std::vector<std::string>& args) {
    std::ostringstream help;
    return parse(args, help);
  }
};

// The UsageError of parsing `args`, which must name every one of `parts`.
void expect_usage_error(const std::vector<std::string>& args, const std::vector<std::string>& parts) {
  SCOPED_TRACE(::testing::PrintToString(args));
  TestApp t;
  try {
    t.parse(args);
    ADD_FAILURE() << "no error";
  } catch (const cli::UsageError& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(ExampleFlags, UnsignedFlagsRefuseNegativeValues) {
  for (const char* v : {"-1", "-0", "-18446744073709551615", "18446744073709551616", "12x", ""})
    expect_usage_error({"--seed", v}, {"--seed", "non-negative integer"});
  TestApp t;
  ASSERT_TRUE(t.parse({"--seed", "18446744073709551615"}));
  EXPECT_EQ(t.c.seed, 18446744073709551615ull);
}

TEST(ExampleFlags, SizesBelowTheirMinimumNameTheFlag) {
  for (const char* flag : {"--heads", "--steps", "--batch-size"})
    for (const char* v : {"0", "-2", "-9223372036854775808", "3x", "1e3"})
      expect_usage_error({flag, v}, {flag, "integer >= 1", v});
  expect_usage_error({"--log-every", "-1"}, {"--log-every", "integer >= 0"});
  TestApp t;
  ASSERT_TRUE(t.parse({"--heads", "4", "--steps=12", "--log-every", "0"}));
  EXPECT_EQ(t.heads, 4);
  EXPECT_EQ(t.c.steps, 12);
  EXPECT_EQ(t.c.log_every, 0);
}

TEST(ExampleFlags, BadValuesAndUnknownFlagsNameTheFlag) {
  for (const char* v : {"0", "-0.5", "nan", "inf", "1e999", "abc", "0.1x"})
    expect_usage_error({"--lr", v}, {"--lr", "positive number", v});
  expect_usage_error({"--precision", "fp4"}, {"--precision", "fp32, fp16, bf16 or fp8", "fp4"});
  expect_usage_error({"--device", "tpu"}, {"--device", "tpu"});
  expect_usage_error({"--bogus", "1"}, {"unknown flag --bogus"});
  expect_usage_error({"--steps", "3", "--nope"}, {"unknown flag --nope"});
  expect_usage_error({"stray"}, {"unexpected argument 'stray'"});
  expect_usage_error({"--steps"}, {"--steps"});
  TestApp t;
  ASSERT_TRUE(t.parse({"--precision", "bf16", "--device", "cpu", "--lr", "2.5e-4"}));
  EXPECT_EQ(t.c.precision, tr::Precision::Bf16);
  EXPECT_TRUE(t.c.device.is_cpu());
  EXPECT_EQ(t.c.lr, 2.5e-4);
}

TEST(ExampleFlags, HelpListsEveryFlagWithItsDefault) {
  TestApp t;
  std::ostringstream help;
  EXPECT_FALSE(t.parse({"--steps", "5", "--help"}, help));
  const std::string text = help.str();
  EXPECT_EQ(text.rfind("a test program\nusage: prog [OPTIONS]", 0), 0u) << text;
  int value_flags = 0;
  for (const CLI::Option* opt : t.app->get_options()) {
    const std::string name = opt->get_name();
    if (name == "--help") continue;  // "-h,--help"
    EXPECT_NE(text.find(name), std::string::npos) << name << " missing from\n" << text;
    // Switches (--memory-plan, a bool flag) have no default; --device's default is in its text.
    if (opt->get_type_size() == 0 || name == "--device" || name == "--memory-plan") continue;
    ++value_flags;
    // The default sits in the flag's entry: up to the next line that starts a flag.
    const size_t at = text.find("  " + name), next = text.find("\n  -", at);
    ASSERT_NE(at, std::string::npos) << name;
    EXPECT_NE(text.substr(at, next - at).find("(default: "), std::string::npos) << name << " in\n" << text;
  }
  EXPECT_EQ(value_flags, 7);  // --heads, --precision, --steps, --batch-size, --lr, --seed, --log-every
  ex::MlpConfig defaults;
  EXPECT_NE(text.find("(default: " + std::to_string(defaults.steps) + ")"), std::string::npos) << text;
  EXPECT_NE(text.find("(default: fp16)"), std::string::npos) << text;
}
