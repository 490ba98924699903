// nn::Module: registration, recursive walks with dotted names, in-place device/dtype moves and
// state dicts.
#include "mixtrain/nn/module.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_set>

#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/memory/trace.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::nn {

namespace {

std::string join_keys(const std::vector<std::string>& keys) {
  std::ostringstream os;
  for (size_t i = 0; i < keys.size(); ++i) os << (i ? ", " : "") << '"' << keys[i] << '"';
  return os.str();
}

// Replaces the contents of `t`'s TensorImpl with a converted copy, so that every handle sharing
// the impl (an optimizer's parameter list, a user's reference) sees the new storage, dtype and
// device. Autograd state that describes the old tensor is dropped: the grad has the old dtype
// and device, and a cached gradient accumulator records the old metadata.
// `format` applies to 4-D tensors only; without one, a tensor keeps its layout.
void convert_in_place(Tensor& t, std::optional<Device> device, std::optional<DType> dtype,
                      std::optional<MemoryFormat> format) {
  TensorImpl& impl = *t.impl();
  const bool cast = dtype && is_floating(impl.dtype) && *dtype != impl.dtype;
  const bool move = device && *device != impl.device;
  const bool wanted = format && t.dim() == 4;
  const MemoryFormat layout = wanted ? *format : t.suggest_memory_format();
  const bool relayout = wanted && (layout == MemoryFormat::ChannelsLast
                                       ? t.suggest_memory_format() != MemoryFormat::ChannelsLast
                                       : !t.is_contiguous());
  if (!cast && !move && !relayout) return;
  Tensor converted;
  {
    NoGradGuard no_grad;
    converted = t.detach();
    if (move) converted = converted.to(*device);
    if (cast) converted = converted.to(*dtype);
    converted = converted.contiguous(layout);
    // to() returns its input when nothing changes; never alias the old storage by accident.
    if (converted.impl()->storage == impl.storage) converted = converted.clone();
  }
  const TensorImpl& src = *converted.impl();
  impl.storage = src.storage;
  impl.offset = src.offset;
  impl.strides = src.strides;
  impl.dtype = src.dtype;
  impl.device = src.device;
  impl.is_view = false;
  impl.grad.reset();
  impl.grad_accumulator.reset();
  // New memory, with its own version count: tensors saved for backward still hold the old memory,
  // which nothing changed.
}

void check_local_name(const Module& m, const std::string& name, const char* what) {
  MT_CHECK(!name.empty(), m.name(), ": ", what, " name must not be empty");
  MT_CHECK(name.find('.') == std::string::npos, m.name(), ": ", what, " name \"", name,
           "\" must not contain '.' (dots separate the levels of nested names)");
}

}  // namespace

Tensor Module::forward(const Tensor& input) {
  MT_ERROR(name_, ": forward(const Tensor&) is not implemented for this module (input ", input.summary(),
           "); call its own forward overload");
}

template <class F>
void Module::visit_tensors(bool params, bool buffers, F&& f) const {
  // Pre-order: this module's own tensors, then each child's under "child_name.".
  struct Walker {
    bool params, buffers;
    F& f;
    void walk(const Module& m, const std::string& prefix) const {
      if (params)
        for (const auto& [n, t] : m.parameters_) f(prefix + n, t, true);
      if (buffers)
        for (const auto& [n, t] : m.buffers_) f(prefix + n, t, false);
      for (const auto& [n, child] : m.children_) walk(*child, prefix + n + ".");
    }
  };
  Walker{params, buffers, f}.walk(*this, "");
}

OrderedDict<std::string, Tensor> Module::named_parameters(bool recurse) const {
  OrderedDict<std::string, Tensor> out;
  if (!recurse) return parameters_;
  // A parameter shared by two submodules (tied weights) is listed once, under its first name,
  // as in PyTorch, so an optimizer does not update it twice.
  std::unordered_set<const TensorImpl*> seen;
  visit_tensors(true, false, [&](const std::string& n, const Tensor& t, bool) {
    if (seen.insert(t.impl().get()).second) out.emplace_back(n, t);
  });
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

OrderedDict<std::string, Tensor> Module::named_buffers(bool recurse) const {
  if (!recurse) return buffers_;
  OrderedDict<std::string, Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  visit_tensors(false, true, [&](const std::string& n, const Tensor& t, bool) {
    if (seen.insert(t.impl().get()).second) out.emplace_back(n, t);
  });
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

OrderedDict<std::string, std::shared_ptr<Module>> Module::named_children() const { return children_; }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}

OrderedDict<std::string, std::shared_ptr<Module>> Module::named_modules() const {
  OrderedDict<std::string, std::shared_ptr<Module>> out;
  struct Walker {
    OrderedDict<std::string, std::shared_ptr<Module>>& out;
    void walk(const Module& m, const std::string& prefix) const {
      for (const auto& [n, c] : m.children_) {
        const std::string name = prefix.empty() ? n : prefix + "." + n;
        out.emplace_back(name, c);
        walk(*c, name);
      }
    }
  };
  Walker{out}.walk(*this, "");
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to(Device device) { to_impl(device, std::nullopt); }
void Module::to(DType dtype) {
  MT_CHECK(is_floating(dtype), name_, ".to: expected a floating dtype, got ", dtype);
  to_impl(std::nullopt, dtype);
}
void Module::to(Device device, DType dtype) {
  MT_CHECK(is_floating(dtype), name_, ".to: expected a floating dtype, got ", dtype);
  to_impl(device, dtype);
}

void Module::to(MemoryFormat format) { to_impl(std::nullopt, std::nullopt, format); }

void Module::to_impl(std::optional<Device> device, std::optional<DType> dtype, std::optional<MemoryFormat> format) {
  // Shared tensors are visited once per owner; the second visit finds them converted already.
  for (auto& [n, t] : parameters_) convert_in_place(t, device, dtype, format);
  for (auto& [n, t] : buffers_) {
    std::optional<DType> target = dtype;
    const bool keep_fp32 = std::find(fp32_buffers_.begin(), fp32_buffers_.end(), n) != fp32_buffers_.end();
    if (keep_fp32 && target && is_half(*target)) target = kFloat32;
    convert_in_place(t, device, target, format);
  }
  for (auto& [n, c] : children_) c->to_impl(device, dtype, format);
  // A dry run reports parameters and buffers (running statistics) under one role.
  for (auto* list : {&parameters_, &buffers_})
    for (auto& [n, t] : *list)
      if (t.defined()) memory::tag_role(t.impl()->storage.get(), t.device(), memory::Role::Parameter);
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  // Detached views of the live tensors, as PyTorch's state_dict(keep_vars=False): reading them
  // is free, and writing to them never records autograd history.
  visit_tensors(true, true, [&](const std::string& n, const Tensor& t, bool) { out.emplace(n, t.detach()); });
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::vector<std::pair<std::string, Tensor>> own;
  visit_tensors(true, true, [&](const std::string& n, const Tensor& t, bool) { own.emplace_back(n, t); });

  // Validate everything first: a bad entry must leave the module untouched.
  std::vector<std::string> missing, unexpected;
  std::set<std::string> own_keys;
  for (const auto& [n, t] : own) {
    own_keys.insert(n);
    if (!state.count(n)) missing.push_back(n);
  }
  for (const auto& [n, t] : state)
    if (!own_keys.count(n)) unexpected.push_back(n);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::ostringstream os;
    os << name_ << ".load_state_dict:";
    if (!missing.empty()) os << " missing keys " << join_keys(missing) << ";";
    if (!unexpected.empty()) os << " unexpected keys " << join_keys(unexpected) << ";";
    os << " nothing was loaded";
    throw Error(os.str());
  }
  for (const auto& [n, t] : own) {
    auto it = state.find(n);
    if (it == state.end()) continue;
    const Tensor& src = it->second;
    MT_CHECK(src.defined(), name_, ".load_state_dict: entry \"", n, "\" is an undefined tensor; nothing was loaded");
    MT_CHECK(src.shape() == t.shape(), name_, ".load_state_dict: shape mismatch for \"", n, "\": checkpoint has ",
             src.summary(), ", the module has ", t.summary(), "; nothing was loaded");
    MT_CHECK(src.dtype() == t.dtype(), name_, ".load_state_dict: dtype mismatch for \"", n, "\": checkpoint has ",
             src.dtype(), ", the module has ", t.dtype(), " (convert the module with to() first); nothing was loaded");
  }

  NoGradGuard no_grad;
  for (auto& [n, t] : own) {
    auto it = state.find(n);
    // Loading a module's own state_dict() back: the entry aliases the parameter already.
    if (it == state.end() || it->second.raw_data() == t.raw_data()) continue;
    t.copy_(it->second);
  }
}

void Module::zero_grad() {
  // set_to_none, as PyTorch's default: the next backward allocates fresh grads, and an
  // optimizer skips parameters without one.
  for (auto& t : parameters()) t.impl()->grad.reset();
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_local_name(*this, name, "parameter");
  MT_CHECK(tensor.defined(), name_, ": register_parameter(\"", name, "\") got an undefined tensor");
  for (const auto& [n, t] : parameters_)
    MT_CHECK(n != name, name_, ": parameter \"", name, "\" is already registered");
  for (const auto& [n, t] : buffers_) MT_CHECK(n != name, name_, ": \"", name, "\" is already a buffer");
  for (const auto& [n, c] : children_) MT_CHECK(n != name, name_, ": \"", name, "\" is already a submodule");
  // A parameter is a leaf: drop any history the initialising computation recorded.
  if (tensor.grad_fn()) tensor = tensor.detach();
  tensor.set_requires_grad(requires_grad);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor, BufferCast cast) {
  check_local_name(*this, name, "buffer");
  MT_CHECK(tensor.defined(), name_, ": register_buffer(\"", name, "\") got an undefined tensor");
  for (const auto& [n, t] : buffers_) MT_CHECK(n != name, name_, ": buffer \"", name, "\" is already registered");
  for (const auto& [n, t] : parameters_) MT_CHECK(n != name, name_, ": \"", name, "\" is already a parameter");
  for (const auto& [n, c] : children_) MT_CHECK(n != name, name_, ": \"", name, "\" is already a submodule");
  if (tensor.grad_fn() || tensor.requires_grad()) tensor = tensor.detach();
  if (cast == BufferCast::KeepFloat32) {
    MT_CHECK(is_floating(tensor.dtype()) && !is_half(tensor.dtype()), name_, ": buffer \"", name,
             "\" registered KeepFloat32 must be fp32 or fp64, got ", tensor.dtype());
    fp32_buffers_.push_back(name);
  }
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  check_local_name(*this, name, "submodule");
  MT_CHECK(child != nullptr, name_, ": register_module(\"", name, "\") got an empty module handle");
  MT_CHECK(child.get() != this, name_, ": a module cannot be its own submodule (\"", name, "\")");
  for (const auto& [n, c] : children_) MT_CHECK(n != name, name_, ": submodule \"", name, "\" is already registered");
  for (const auto& [n, t] : parameters_) MT_CHECK(n != name, name_, ": \"", name, "\" is already a parameter");
  for (const auto& [n, t] : buffers_) MT_CHECK(n != name, name_, ": \"", name, "\" is already a buffer");
  children_.emplace_back(name, std::move(child));
}

}  // namespace mixtrain::nn
