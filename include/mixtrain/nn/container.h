#pragma once
// Sequential (chains single-input forwards) and ModuleList (holds modules, no forward).
// Children are named by position: "0", "1", ... so parameters read "0.weight", "2.bias".
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

namespace detail {
template <class T, class = void>
struct is_module_holder : std::false_type {};
template <class T>
struct is_module_holder<T, std::void_t<typename T::ImplType>>
    : std::is_base_of<ModuleHolder<typename T::ImplType>, T> {};

template <class T, class = void>
struct is_module_ptr : std::false_type {};
template <class T>
struct is_module_ptr<std::shared_ptr<T>, std::enable_if_t<std::is_base_of_v<Module, T>>> : std::true_type {};

// What can be appended to a container: a module handle (Linear, Sequential, ...) or a
// shared_ptr to a Module.
template <class T>
constexpr bool is_appendable_v = is_module_holder<std::decay_t<T>>::value || is_module_ptr<std::decay_t<T>>::value;

template <class T>
std::shared_ptr<Module> as_module_ptr(T&& m) {
  if constexpr (is_module_holder<std::decay_t<T>>::value) {
    return m.ptr();
  } else {
    return std::forward<T>(m);
  }
}
}  // namespace detail

// Shared by Sequential and ModuleList: an ordered list of children named by position.
class ModuleListBase : public Module {
 public:
  using Module::Module;

  template <class M, class = std::enable_if_t<detail::is_appendable_v<M>>>
  void push_back(M&& module) {
    append(detail::as_module_ptr(std::forward<M>(module)));
  }

  size_t size() const { return modules_.size(); }
  bool is_empty() const { return modules_.empty(); }
  // The i-th module; throws mixtrain::Error when out of range.
  std::shared_ptr<Module> operator[](size_t index) const;
  std::shared_ptr<Module> ptr(size_t index) const { return (*this)[index]; }
  // The i-th module as its implementation type (nullptr if it is another type).
  template <class Impl>
  std::shared_ptr<Impl> ptr_as(size_t index) const {
    return std::dynamic_pointer_cast<Impl>((*this)[index]);
  }

  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 protected:
  void append(std::shared_ptr<Module> module);

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

class SequentialImpl : public ModuleListBase {
 public:
  SequentialImpl() : ModuleListBase("Sequential") {}
  template <class... Ms, class = std::enable_if_t<(sizeof...(Ms) > 0) && (detail::is_appendable_v<Ms> && ...)>>
  explicit SequentialImpl(Ms&&... modules) : ModuleListBase("Sequential") {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  // Each module's forward(const Tensor&) on the previous one's output.
  Tensor forward(const Tensor& input) override;
};
MT_MODULE(Sequential);

class ModuleListImpl : public ModuleListBase {
 public:
  ModuleListImpl() : ModuleListBase("ModuleList") {}
  template <class... Ms, class = std::enable_if_t<(sizeof...(Ms) > 0) && (detail::is_appendable_v<Ms> && ...)>>
  explicit ModuleListImpl(Ms&&... modules) : ModuleListBase("ModuleList") {
    (push_back(std::forward<Ms>(modules)), ...);
  }
};
MT_MODULE(ModuleList);

}  // namespace mixtrain::nn
