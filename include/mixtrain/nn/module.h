#pragma once
// nn::Module: the base of every layer and model. It owns named parameters, buffers and child
// modules, in registration order, and walks them for parameters(), state_dict(), to() and
// train()/eval(). As in PyTorch's C++ frontend, user code holds modules through handles
// (ModuleHolder<Impl>): copies of a handle share one module and its parameters.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mixtrain/core/ordered_dict.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::nn {

// How Module::to(DType) treats a buffer.
enum class BufferCast {
  FollowModule,  // cast with the parameters (PyTorch's behaviour)
  KeepFloat32,   // never below fp32: to(kFloat16) / to(kBFloat16) leave it fp32, to(kFloat64) widens it
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string name = "Module") : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Single-input forward, which Sequential chains. Modules with other signatures define their
  // own forward and leave this one throwing.
  virtual Tensor forward(const Tensor& input);

  const std::string& name() const { return name_; }

  // The named lists are OrderedDicts as in libtorch: items with .key() / .value() (and .first /
  // .second), looked up by name with ["weight"], converting to a vector of pairs.
  std::vector<Tensor> parameters(bool recurse = true) const;
  OrderedDict<std::string, Tensor> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  OrderedDict<std::string, Tensor> named_buffers(bool recurse = true) const;
  OrderedDict<std::string, std::shared_ptr<Module>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  // Every descendant (not this module), pre-order, by dotted name ("0", "encoder.conv1").
  OrderedDict<std::string, std::shared_ptr<Module>> named_modules() const;

  // Training mode for this module and its children (dropout, batch norm).
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves parameters and buffers (in place: existing parameter handles see the change, as an
  // optimizer built earlier needs). to(DType) casts floating parameters and buffers, except that
  // buffers registered with BufferCast::KeepFloat32 stay fp32 under a half dtype.
  void to(Device device);
  void to(DType dtype);
  void to(Device device, DType dtype);
  // Lays 4-D parameters and buffers (convolution weights) out in `format`, in place, as PyTorch's
  // module.to(memory_format=...): with channels-last activations a convolution then reads its
  // weight as it is. Optimizer state and gradients follow the parameters' layout; device and
  // dtype moves keep it.
  void to(MemoryFormat format);

  // Parameters and buffers by dotted name ("0.weight", "encoder.conv1.bias").
  std::map<std::string, Tensor> state_dict() const;
  // Copies values into the existing tensors; strict: the key sets must match. Checks shapes
  // and dtypes first, so a mismatch changes nothing.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // Sets every parameter's grad to undefined (PyTorch's set_to_none=True).
  void zero_grad();

 protected:
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  // KeepFloat32 is for statistics that accumulate small updates (batch norm's running mean and
  // variance): in fp16 an update of 0.1% of the value rounds away, so they must stay fp32 even
  // when the model is cast to half.
  Tensor register_buffer(const std::string& name, Tensor tensor, BufferCast cast = BufferCast::FollowModule);
  template <class Holder>
  Holder register_module(const std::string& name, Holder holder) {
    add_child(name, holder.ptr());
    return holder;
  }
  void add_child(const std::string& name, std::shared_ptr<Module> child);

 private:
  template <class F>
  void visit_tensors(bool params, bool buffers, F&& f) const;
  void to_impl(std::optional<Device> device, std::optional<DType> dtype, std::optional<MemoryFormat> format = {});

  std::string name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::string> fp32_buffers_;  // names of this module's KeepFloat32 buffers
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// A shared handle to a module implementation, like torch::nn::ModuleHolder.
template <class Impl>
class ModuleHolder {
 public:
  using ImplType = Impl;
  ModuleHolder(std::nullptr_t) {}  // NOLINT: empty handle, assigned later
  explicit ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  template <class... Args, class = std::enable_if_t<std::is_constructible_v<Impl, Args&&...>>>
  explicit ModuleHolder(Args&&... args) : impl_(std::make_shared<Impl>(std::forward<Args>(args)...)) {}

  Impl* operator->() const { return impl_.get(); }
  Impl& operator*() const { return *impl_; }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  operator Module&() const { return *impl_; }  // NOLINT: pass a handle where a Module& is expected

  template <class... Args>
  auto forward(Args&&... args) const {
    return impl_->forward(std::forward<Args>(args)...);
  }
  template <class... Args>
  auto operator()(Args&&... args) const {
    return impl_->forward(std::forward<Args>(args)...);
  }

  std::vector<Tensor> parameters(bool recurse = true) const { return impl_->parameters(recurse); }
  OrderedDict<std::string, Tensor> named_parameters(bool recurse = true) const { return impl_->named_parameters(recurse); }
  std::map<std::string, Tensor> state_dict() const { return impl_->state_dict(); }
  void load_state_dict(const std::map<std::string, Tensor>& s, bool strict = true) const { impl_->load_state_dict(s, strict); }
  void train(bool on = true) const { impl_->train(on); }
  void eval() const { impl_->eval(); }
  void to(Device d) const { impl_->to(d); }
  void to(DType t) const { impl_->to(t); }
  void to(Device d, DType t) const { impl_->to(d, t); }
  void to(MemoryFormat f) const { impl_->to(f); }
  void zero_grad() const { impl_->zero_grad(); }

 private:
  std::shared_ptr<Impl> impl_;
};

// Declares `Name` as the handle of `NameImpl`.
#define MT_MODULE(Name)                           \
  class Name : public ::mixtrain::nn::ModuleHolder<Name##Impl> { \
   public:                                        \
    using ::mixtrain::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
  }

}  // namespace mixtrain::nn
