#pragma once
// Command-line parsing for the example programs and the `mixtrain` tool, one parser for both
// (CLI11): every flag listed in --help with its default, numbers parsed whole and range-checked,
// an unknown flag or a bad value a one-line UsageError naming the flag.
#include <cstdint>
#include <exception>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <mixtrain/train/train_loop.h>

namespace mixtrain::examples::cli {

// A bad command line: the message names the flag (or argument); programs exit with code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An App whose help reads "usage: NAME [OPTIONS] ..." and gives each flag's default after its
// description ("(default: 200)"); every option records its default as it is added.
std::unique_ptr<CLI::App> make_app(const std::string& name, const std::string& description);

// Parses args (without the program name). Returns false when --help/-h was given, after printing
// the help to `help_out`; throws UsageError for anything wrong.
bool parse(CLI::App& app, const std::vector<std::string>& args, std::ostream& help_out);
bool parse(CLI::App& app, int argc, char** argv, std::ostream& help_out);

// Validators that name what they expect ("--steps: expects an integer >= 1, got '-3'").
CLI::Validator integer_at_least(int64_t min);
CLI::Validator integer_in(int64_t min, int64_t max);
CLI::Validator unsigned_integer();          // whole, no sign (once "--seed -1" became 2^64 - 1)
CLI::Validator finite_number(bool positive);
CLI::Validator one_of(const std::vector<std::string>& names);
CLI::Validator device_name();               // cpu, cuda or cuda:N

// --precision and --device: parsed into `precision` / `device` when given.
void add_precision_flag(CLI::App& app, train::Precision& precision);
void add_device_flag(CLI::App& app, Device& device);

// The flags every example trainer takes (--precision, --device, --steps, --batch-size, --lr,
// --seed, --log-every, --memory-plan), bound to its config's fields with their current values as defaults.
template <class Config>
void add_run_flags(CLI::App& app, Config& c) {
  add_precision_flag(app, c.precision);
  add_device_flag(app, c.device);
  app.add_option("--steps", c.steps, "training steps")->check(integer_at_least(1))->type_name("N");
  app.add_option("--batch-size", c.batch_size, "samples per step")->check(integer_at_least(1))->type_name("N");
  app.add_option("--lr", c.lr, "learning rate (AdamW)")->check(finite_number(true))->type_name("X");
  app.add_option("--seed", c.seed, "seed of the weights and the data order")->check(unsigned_integer())->type_name("N");
  app.add_option("--log-every", c.log_every, "a progress line every K steps (0: none)")
      ->check(integer_at_least(0))
      ->type_name("K");
  app.add_flag("--memory-plan", c.memory_plan,
               "serve each step's buffers from a static plan per batch shape (docs/MEMORY.md)");
}

// An example program's main: parses with `setup`'s flags, runs, and maps the outcome to an exit
// code: 0 (also after --help), 2 for a usage error, 1 for any other error (its message on stderr).
// `setup(app)` adds the flags; `program()` runs after a successful parse.
template <class Setup, class Program>
int run_program(const std::string& name, const std::string& description, int argc, char** argv, Setup&& setup,
                Program&& program) {
  try {
    const auto app = make_app(name, description);
    setup(*app);
    if (!parse(*app, argc, argv, std::cout)) return 0;
    program();
    return 0;
  } catch (const UsageError& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}

}  // namespace mixtrain::examples::cli
