// Sequential and ModuleList.
#include "mixtrain/nn/container.h"

#include <iterator>
#include <string>
#include <typeinfo>

#include "mixtrain/base/error.h"
#include "mixtrain/nn/activation.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/ops/op_list.h"

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

namespace {

// A Linear immediately followed by a ReLU can run as one linear_relu. Exact types only: a
// subclass may override forward. Only while relu's cast policy is the default Passthrough:
// linear_relu is linear to autocast, and a policy that casts relu's input would change the result.
// Modules have no hooks, so nothing else can observe the intermediate.
bool fuses_with_next(const Module& m, const Module* next) {
  return next != nullptr && typeid(m) == typeid(LinearImpl) && typeid(*next) == typeid(ReLUImpl) &&
         ops::policy(ops::OpId::relu) == amp::CastPolicy::Passthrough;
}

}  // namespace

Tensor SequentialImpl::forward(const Tensor& input) {
  Tensor x = input;
  for (auto it = begin(); it != end(); ++it) {
    const auto next = std::next(it);
    if (fuses_with_next(**it, next != end() ? next->get() : nullptr)) {
      x = static_cast<LinearImpl&>(**it).forward_relu(x);
      it = next;
    } else {
      x = (*it)->forward(x);
    }
  }
  return x;
}

}  // namespace mixtrain::nn
