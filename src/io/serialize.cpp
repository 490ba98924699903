// mixtrain::save / load: safetensors files with a "mixtrain.content" metadata entry saying what
// they hold, so a file saved from a tensor is not silently read into a module.
#include "mixtrain/io/serialize.h"

#include <map>

#include "mixtrain/base/error.h"
#include "mixtrain/io/safetensors.h"

namespace mixtrain {

namespace {

constexpr const char* kContentKey = "mixtrain.content";

io::NamedTensors module_tensors(const nn::Module& module) {
  io::NamedTensors out = module.named_parameters();
  for (auto& b : module.named_buffers()) out.push_back(b);
  return out;
}

// The file's tensors, after checking it holds `content`.
io::NamedTensors read(const std::string& path, const std::string& content) {
  io::SafetensorsFile file = io::load_safetensors(path);
  auto it = file.metadata.find(kContentKey);
  MT_CHECK(it != file.metadata.end(), "load: ", path, " was not written by mixtrain::save (no \"", kContentKey,
           "\" in its metadata); read it with io::load_safetensors");
  MT_CHECK(it->second == content, "load: ", path, " holds a ", it->second, ", not a ", content, "; nothing was loaded");
  return std::move(file.tensors);
}

std::string index_name(size_t i) { return std::to_string(i); }

}  // namespace

void save(const nn::Module& module, const std::string& path) {
  io::save_safetensors(path, module_tensors(module), {{kContentKey, "module"}});
}

void load(nn::Module& module, const std::string& path) {
  io::NamedTensors tensors = read(path, "module");
  std::map<std::string, Tensor> state;
  for (auto& [name, t] : tensors) state.emplace(name, std::move(t));
  // Strict, and every name, shape and dtype checked before the first copy.
  try {
    module.load_state_dict(state, /*strict=*/true);
  } catch (const Error& e) {
    MT_ERROR("load: ", path, ": ", e.what());
  }
}

void save(const Tensor& tensor, const std::string& path) {
  MT_CHECK(tensor.defined(), "save: ", path, ": the tensor is undefined");
  io::save_safetensors(path, {{"tensor", tensor}}, {{kContentKey, "tensor"}});
}

void load(Tensor& tensor, const std::string& path) {
  io::NamedTensors tensors = read(path, "tensor");
  MT_CHECK(tensors.size() == 1 && tensors[0].first == "tensor", "load: ", path, " should hold one tensor named ",
           "\"tensor\", holds ", tensors.size(), "; nothing was loaded");
  tensor = std::move(tensors[0].second);
}

void save(const std::vector<Tensor>& tensors, const std::string& path) {
  io::NamedTensors named;
  for (size_t i = 0; i < tensors.size(); ++i) {
    MT_CHECK(tensors[i].defined(), "save: ", path, ": tensor ", i, " of the list is undefined");
    named.emplace_back(index_name(i), tensors[i]);
  }
  io::save_safetensors(path, named, {{kContentKey, "tensor list"}, {"mixtrain.count", std::to_string(tensors.size())}});
}

void load(std::vector<Tensor>& tensors, const std::string& path) {
  io::NamedTensors named = read(path, "tensor list");
  // The writer orders tensors by size, so they are put back by their index names, all present.
  std::vector<Tensor> out(named.size());
  for (auto& [name, t] : named) {
    size_t i = out.size();
    if (!name.empty() && name.size() < 10 && name.find_first_not_of("0123456789") == std::string::npos) i = std::stoul(name);
    MT_CHECK(i < out.size() && index_name(i) == name && !out[i].defined(), "load: ", path, ": tensor \"", name,
             "\" is not an index of a list of ", out.size(), "; nothing was loaded");
    out[i] = std::move(t);
  }
  tensors = std::move(out);
}

}  // namespace mixtrain
