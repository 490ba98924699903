#pragma once
// nn::init::SkipInitGuard: while one is alive on a thread, the nn::init initialisers check their
// arguments but neither draw from the default generator nor write the tensor, so modules built
// under it keep their parameters as factory-made (empty()'s memory, ones(), zeros()). For a model
// whose values nobody reads: one built only to move to Device::meta() for a memory::dry_run,
// where the full transformer's weight initialisation (an fp64 draw per parameter on the CPU) is most of the
// cost. The default generator does not advance, so later draws differ from an initialised build.
namespace mixtrain::nn::init {

class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool previous_;
};

bool is_init_skipped();  // a SkipInitGuard is alive on this thread

}  // namespace mixtrain::nn::init
