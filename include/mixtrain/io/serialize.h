#pragma once
// mixtrain::save / mixtrain::load, libtorch's torch::save / torch::load: a module's parameters and
// buffers, one tensor or a list of tensors, in a safetensors file (io/safetensors.h), so the file
// also opens in Python with safetensors.torch.load_file.
//
//   mixtrain::save(model, "model.safetensors");   // model: a module handle, a Module& or a shared_ptr
//   mixtrain::load(model, "model.safetensors");   // into the existing parameters
//   mixtrain::save(std::vector<Tensor>{a, b}, "pair.safetensors");
//
// Saving is atomic (a temporary file next to the path, fsynced, renamed over it). Loading checks
// the whole file first (the safetensors structure, what it holds: a module's, a tensor's or a
// list's, and for a module every name, shape and dtype against it) and changes nothing when any
// check fails. Loaded tensors are on the CPU (move them with to()); a module keeps its parameters'
// device, the values are copied into them.
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/core/tensor.h"
#include "mixtrain/nn/module.h"

namespace mixtrain {

void save(const nn::Module& module, const std::string& path);
void load(nn::Module& module, const std::string& path);
void save(const Tensor& tensor, const std::string& path);
void load(Tensor& tensor, const std::string& path);
void save(const std::vector<Tensor>& tensors, const std::string& path);
void load(std::vector<Tensor>& tensors, const std::string& path);

template <class M, class = std::enable_if_t<std::is_base_of_v<nn::Module, M>>>
void save(const std::shared_ptr<M>& module, const std::string& path) {
  save(static_cast<const nn::Module&>(*module), path);
}
template <class M, class = std::enable_if_t<std::is_base_of_v<nn::Module, M>>>
void load(const std::shared_ptr<M>& module, const std::string& path) {
  load(static_cast<nn::Module&>(*module), path);
}

}  // namespace mixtrain
