// Sequential and ModuleList.
#include "mixtrain/nn/container.h"

#include <string>

#include "mixtrain/core/error.h"

namespace mixtrain::nn {

std::shared_ptr<Module> ModuleListBase::operator[](size_t index) const {
  MT_CHECK(index < modules_.size(), name(), "[", index, "]: index out of range for ", modules_.size(), " modules");
  return modules_[index];
}

void ModuleListBase::append(std::shared_ptr<Module> module) {
  MT_CHECK(module != nullptr, name(), ".push_back: got an empty module handle");
  add_child(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Tensor SequentialImpl::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& m : *this) x = m->forward(x);
  return x;
}

}  // namespace mixtrain::nn
