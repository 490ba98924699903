#include "io/optimizer_files.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "core/json_fields.h"
#include "io/checkpoint_dir.h"
#include "io/checkpoint_sharded.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/base/shape.h"

namespace mixtrain::io::detail {

namespace {

constexpr int64_t kMaxWorld = int64_t{1} << 20;
constexpr int64_t kMaxDim = int64_t{1} << 48;

// "state.<k>.<name>": k and name, or false.
bool split_state_name(const std::string& s, size_t* k, std::string* name) {
  if (s.rfind("state.", 0) != 0) return false;
  const size_t dot = s.find('.', 6);
  if (dot == std::string::npos || dot == 6 || dot + 1 == s.size() || dot - 6 > 9) return false;
  size_t v = 0;
  for (size_t i = 6; i < dot; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + static_cast<size_t>(s[i] - '0');
  }
  *k = v;
  *name = s.substr(dot + 1);
  return true;
}

std::string whole_name(size_t param, const std::string& name) { return "state." + std::to_string(param) + "." + name; }

}  // namespace

OptimizerFiles::OptimizerFiles(const std::string& dir, const nlohmann::json& trainer,
                               const mixtrain::detail::InputFile& manifest) {
  const std::string where = manifest.path();
  sharded_ = trainer.contains("sharded");
  if (!sharded_) {
    json_io::check_object_keys(trainer["files"], {kModelFile, kOptimizerFile}, {}, where + ".files");
    files_.push_back(std::make_unique<CheckpointTensorFile>(dir, kOptimizerFile, trainer["files"], manifest));
    index_single();
    return;
  }
  const nlohmann::json& index = trainer["sharded"];
  index_shards(index, where + ".sharded");
  // The manifest names the model and exactly the index's shards.
  const nlohmann::json& files = trainer["files"];
  MT_CHECK(files.is_object(), where, ".files must be an object");
  std::set<std::string> expected = {kModelFile};
  for (const auto& s : index["shards"]) expected.insert(s["file"].get<std::string>());
  for (const auto& [k, v] : files.items())
    MT_CHECK(expected.count(k), where, ".files names \"", k, "\", which the sharded index does not");
  for (const std::string& name : expected)
    MT_CHECK(files.contains(name), where, ".files has no entry for \"", name, "\" (the checkpoint is incomplete)");
  for (const auto& s : index["shards"]) {
    const std::string name = s["file"].get<std::string>();
    files_.push_back(std::make_unique<CheckpointTensorFile>(dir, name.c_str(), files, manifest));
    check_place(*files_.back(), files_.size() - 1, index);
  }
  // Each shard holds exactly the pieces the index gives it, every piece's tensors as the index's
  // dtypes say, and each whole tensor is held by every piece of its parameter or by none.
  const nlohmann::json& params = index["params"];
  std::map<std::string, DType> dtypes;
  for (const auto& [k, v] : index["state_dtypes"].items())
    dtypes.emplace(k, dtype_from_safetensors(v.get<std::string>()));
  std::vector<int64_t> pieces_of_param(params.size(), 0);
  for (const auto& ps : file_pieces_)
    for (const StatePiece& p : ps) ++pieces_of_param[p.param];
  for (size_t f = 0; f < files_.size(); ++f) {
    const std::string& path = files_[f]->path();
    for (const SafetensorsEntry& e : files_[f]->index().entries) {
      size_t k = 0;
      std::string name;
      MT_CHECK(split_state_name(e.name, &k, &name), "load_checkpoint: ", path, " has tensor \"", e.name,
               "\"; an optimizer shard holds \"state.<piece>.<name>\" only");
      MT_CHECK(k < file_pieces_[f].size(), "load_checkpoint: ", path, " has tensor \"", e.name, "\", but the index ",
               "gives this shard ", file_pieces_[f].size(), " pieces");
      auto dt = dtypes.find(name);
      MT_CHECK(dt != dtypes.end(), "load_checkpoint: ", path, " has tensor \"", e.name, "\", whose name \"", name,
               "\" is not in the index's state_dtypes");
      const StatePiece& p = file_pieces_[f][k];
      MT_CHECK(e.dtype == dt->second && e.shape == Shape{p.numel}, "load_checkpoint: ", path, ": tensor \"", e.name,
               "\" is ", shape_str(e.shape), " ", e.dtype, " but the index says [", p.numel, "] ", dt->second,
               " (elements ", p.offset, " to ", p.offset + p.numel, " of parameter ",
               params[p.param]["name"].get<std::string>(), ")");
      stored_[whole_name(p.param, name)].push_back({f, &e, p.offset, p.numel});
    }
  }
  for (auto& [name, pieces] : stored_) {
    size_t param = 0;
    std::string n;
    split_state_name(name, &param, &n);
    MT_CHECK(static_cast<int64_t>(pieces.size()) == pieces_of_param[param], "load_checkpoint: the shards of ", dir,
             " hold \"", n, "\" for ", pieces.size(), " of the ", pieces_of_param[param], " pieces of parameter ",
             params[param]["name"].get<std::string>(), " (a shard is missing tensors)");
    std::sort(pieces.begin(), pieces.end(), [](const Stored& a, const Stored& b) { return a.offset < b.offset; });
    Shape shape;
    for (const auto& d : params[param]["shape"]) shape.push_back(d.get<int64_t>());
    stand_ins_.emplace_back(name, zeros({}, TensorOptions(dtypes.at(n))).expand(shape));
  }
}

OptimizerFiles::~OptimizerFiles() = default;

void OptimizerFiles::check_place(const CheckpointTensorFile& file, size_t rank, const nlohmann::json& index) const {
  const Metadata& m = file.index().metadata;
  auto said = [&](const char* key) {
    auto it = m.find(key);
    return it == m.end() ? std::string("(none)") : it->second;
  };
  const std::string world = std::to_string(index["world_size"].get<int64_t>());
  const std::string pieces = pieces_json(file_pieces_[rank]).dump();
  const std::string what = "load_checkpoint: " + file.path() + " ";
  MT_CHECK(said("save_id") == save_id_, what, "belongs to save \"", said("save_id"), "\", not to this checkpoint's \"",
           save_id_, "\" (a shard of another run or another save); nothing was loaded");
  MT_CHECK(said("rank") == std::to_string(rank) && said("world_size") == world, what, "says it is rank ", said("rank"),
           " of ", said("world_size"), ", but the index has it as rank ", rank, " of ", world, "; nothing was loaded");
  MT_CHECK(said("pieces") == pieces, what, "holds the pieces ", said("pieces"), " but the index gives it ", pieces,
           " (the index or the shard was edited: its moments would land on other elements); nothing was loaded");
}

void OptimizerFiles::index_single() {
  for (const SafetensorsEntry& e : files_[0]->index().entries) {
    stored_[e.name].push_back({0, &e, 0, shape_numel(e.shape)});
    stand_ins_.emplace_back(e.name, zeros({}, TensorOptions(e.dtype)).expand(e.shape));
  }
}

void OptimizerFiles::index_shards(const nlohmann::json& index, const std::string& where) {
  json_io::check_object_keys(index, {"save_id", "world_size", "params", "state_dtypes", "shards", "crc32"}, {}, where);
  // trainer.json has no checksum of its own among the files: the index carries one.
  const std::string crc = json_io::json_string(index, "crc32", where);
  MT_CHECK(crc == index_crc(index), where, ".crc32 is \"", crc, "\" but the index's CRC-32 is \"", index_crc(index),
           "\": the index was edited after it was written; nothing was loaded");
  save_id_ = json_io::json_string(index, "save_id", where);
  const int64_t world = json_io::json_integer(index, "world_size", where, 1, kMaxWorld);
  const nlohmann::json& params = index["params"];
  MT_CHECK(params.is_array(), where, ".params must be an array");
  std::vector<int64_t> numel;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string at = json_io::json_path(where + ".params", i);
    json_io::check_object_keys(params[i], {"name", "shape"}, {}, at);
    json_io::json_string(params[i], "name", at);
    const nlohmann::json& shape = params[i]["shape"];
    MT_CHECK(shape.is_array() && shape.size() <= 16, at, ".shape must be an array of at most 16 sizes");
    Shape s;
    for (const auto& d : shape) {
      MT_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() <= kMaxDim, at,
               ".shape must hold sizes from 0 to 2^48, not ", d.dump());
      s.push_back(d.get<int64_t>());
    }
    numel.push_back(checked_numel(s, "load_checkpoint"));
  }
  const nlohmann::json& dtypes = index["state_dtypes"];
  MT_CHECK(dtypes.is_object(), where, ".state_dtypes must be an object");
  for (const auto& [k, v] : dtypes.items()) {
    MT_CHECK(v.is_string(), where, ".state_dtypes.", k, " must be a dtype name");
    dtype_from_safetensors(v.get<std::string>());
  }
  const nlohmann::json& shards = index["shards"];
  MT_CHECK(shards.is_array() && static_cast<int64_t>(shards.size()) == world, where, ".shards must list ", world,
           " shards (world_size)");
  std::vector<std::tuple<size_t, int64_t, int64_t>> all;  // (param, offset, numel) of every piece
  for (size_t r = 0; r < shards.size(); ++r) {
    const std::string at = json_io::json_path(where + ".shards", r);
    json_io::check_object_keys(shards[r], {"file", "pieces"}, {}, at);
    const std::string file = json_io::json_string(shards[r], "file", at);
    const std::string want = shard_file_name(static_cast<int>(r), static_cast<int>(world));
    MT_CHECK(file == want, at, ".file is \"", file, "\"; shard ", r, " of ", world, " is \"", want, "\"");
    const nlohmann::json& pieces = shards[r]["pieces"];
    MT_CHECK(pieces.is_array(), at, ".pieces must be an array of [param, offset, numel]");
    std::vector<StatePiece> mine;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const nlohmann::json& q = pieces[k];
      const std::string pat = json_io::json_path(at + ".pieces", k);
      MT_CHECK(q.is_array() && q.size() == 3 && q[0].is_number_integer() && q[1].is_number_integer() &&
                   q[2].is_number_integer(),
               pat, " must be [param, offset, numel] (integers)");
      const int64_t p = q[0].get<int64_t>(), off = q[1].get<int64_t>(), n = q[2].get<int64_t>();
      MT_CHECK(p >= 0 && p < static_cast<int64_t>(numel.size()), pat, ": parameter ", p, " is not one of the ",
               numel.size(), " parameters");
      MT_CHECK(off >= 0 && n > 0 && off <= numel[static_cast<size_t>(p)] - n, pat, ": elements ", off, " to ", off + n,
               " are not within parameter ", p, " (", numel[static_cast<size_t>(p)], " elements)");
      mine.push_back({static_cast<size_t>(p), off, n});
      all.emplace_back(static_cast<size_t>(p), off, n);
    }
    file_pieces_.push_back(std::move(mine));
  }
  // Every parameter's elements held once: its pieces tile [0, numel).
  std::sort(all.begin(), all.end());
  size_t at = 0;
  for (size_t p = 0; p < numel.size(); ++p) {
    int64_t next = 0;
    for (; at < all.size() && std::get<0>(all[at]) == p; ++at) {
      MT_CHECK(std::get<1>(all[at]) == next, where, ": the pieces of parameter ", p, " (",
               params[p]["name"].get<std::string>(), ") ", std::get<1>(all[at]) < next ? "overlap" : "leave a gap",
               " at element ", std::min(next, std::get<1>(all[at])));
      next += std::get<2>(all[at]);
    }
    MT_CHECK(next == numel[p] || next == 0, where, ": the pieces of parameter ", p, " (",
             params[p]["name"].get<std::string>(), ") hold ", next, " of its ", numel[p], " elements");
  }
}

void OptimizerFiles::verify(const std::vector<StatePiece>* needs) const {
  for (size_t f = 0; f < files_.size(); ++f) {
    bool needed = !sharded_ || needs == nullptr;
    for (size_t i = 0; !needed && i < file_pieces_[f].size(); ++i)
      for (const StatePiece& n : *needs) {
        const StatePiece& p = file_pieces_[f][i];
        if (n.param == p.param && n.offset < p.offset + p.numel && p.offset < n.offset + n.numel) {
          needed = true;
          break;
        }
      }
    if (!needed) continue;
    files_[f]->verify();
    check_moments(f);
  }
}

void OptimizerFiles::check_moments(size_t f) const {
  for (const SafetensorsEntry& e : files_[f]->index().entries) {
    size_t k = 0;
    std::string name;
    const bool split = split_state_name(e.name, &k, &name);
    // Second moments are squares: a negative one has no square root (the update turns NaN).
    const bool non_negative = split && (name == "exp_avg_sq" || name == "max_exp_avg_sq");
    std::string what = split ? name : std::string("optimizer state");
    if (split && sharded_ && k < file_pieces_[f].size()) {
      const StatePiece& p = file_pieces_[f][k];
      what += " of elements " + std::to_string(p.offset) + " to " + std::to_string(p.offset + p.numel) +
              " of parameter " + std::to_string(p.param);
    } else if (split) {
      what += " of parameter " + std::to_string(k);
    }
    files_[f]->check_values(e, non_negative, what);
  }
}

bool OptimizerFiles::read_whole_in_file_order(const std::vector<StateDestination>& dsts) const {
  // The common case (one file, the whole optimizer): read_into, which checks the CRC on the way.
  std::map<std::string, const StateDestination*> by_name;
  for (const StateDestination& d : dsts)
    if (d.offset != 0 || !by_name.emplace(d.name, &d).second) return false;
  std::vector<Tensor> in_order;
  for (const SafetensorsEntry& e : files_[0]->index().entries) {
    auto it = by_name.find(e.name);
    if (it == by_name.end() || it->second->dst.numel() != shape_numel(e.shape)) return false;
    in_order.push_back(it->second->dst);
  }
  if (in_order.size() != dsts.size()) return false;
  files_[0]->read_into(in_order);
  return true;
}

void OptimizerFiles::read(const std::vector<StateDestination>& dsts) const {
  if (!sharded_ && read_whole_in_file_order(dsts)) return;
  NoGradGuard no_grad;
  for (const StateDestination& d : dsts) {
    auto it = stored_.find(d.name);
    MT_CHECK(it != stored_.end(), "load_checkpoint: internal error: no stored tensor \"", d.name, "\"");
    const bool direct = d.dst.device().is_cpu() && d.dst.is_contiguous();
    const Tensor host = direct ? d.dst : Tensor::empty({d.dst.numel()}, TensorOptions(d.dst.dtype()));
    const size_t esize = element_size(d.dst.dtype());
    char* out = static_cast<char*>(host.raw_data());
    const int64_t lo = d.offset, hi = d.offset + d.dst.numel();
    int64_t covered = lo;
    for (const Stored& s : it->second) {
      const int64_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.numel);
      if (a >= b) continue;
      MT_CHECK(a == covered && s.entry->dtype == d.dst.dtype(), "load_checkpoint: internal error: \"", d.name,
               "\" is not held whole");
      files_[s.file]->read_bytes(*s.entry, static_cast<uint64_t>(a - s.offset) * esize,
                                 static_cast<size_t>(b - a) * esize, out + static_cast<size_t>(a - lo) * esize);
      covered = b;
    }
    MT_CHECK(covered == hi, "load_checkpoint: internal error: elements ", covered, " to ", hi, " of \"", d.name,
             "\" are not stored");
    if (!direct) Tensor(d.dst).copy_(host.view(d.dst.shape()));
  }
}

}  // namespace mixtrain::io::detail
