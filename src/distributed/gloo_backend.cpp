// The Gloo backend: rendezvous through Gloo's file or Redis store, a full mesh of TCP pairs, and
// Gloo's ring all-reduce, broadcast, all-gather and barrier on CPU tensors. Built only when
// libgloo was found (MIXTRAIN_HAVE_GLOO); otherwise every entry point explains what is missing.
#include "distributed/internal.h"
#include "mixtrain/core/error.h"
#include "mixtrain/core/half.h"

#if MIXTRAIN_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#if GLOO_USE_REDIS && defined(MIXTRAIN_GLOO_REDIS)
#define MT_REDIS_STORE 1
#include <gloo/rendezvous/redis_store.h>
#endif
#include <gloo/transport/tcp/device.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#endif

namespace mixtrain::distributed {

#if MIXTRAIN_HAVE_GLOO

bool gloo_available() { return true; }

namespace {

// Gloo's stores wait 30 s by default whatever the context's timeout; this one applies ours to
// every get() and wait(), so an absent rank ends the rendezvous with our timeout and message.
class TimedStore : public gloo::rendezvous::Store, public KeyValueStore {
 public:
  // owned_dir: a directory this store made and removes when it goes.
  TimedStore(std::unique_ptr<gloo::rendezvous::Store> inner, std::string spec, std::chrono::milliseconds timeout,
             std::string owned_dir = "")
      : inner_(std::move(inner)),
        file_(dynamic_cast<gloo::rendezvous::FileStore*>(inner_.get())),
        spec_(std::move(spec)),
        timeout_(timeout),
        owned_dir_(std::move(owned_dir)) {}
  ~TimedStore() override {
    if (owned_dir_.empty()) return;
    forget_own_keys();
    rmdir(owned_dir_.c_str());  // best effort: a destructor must not throw
  }
  void set(const std::string& key, const std::vector<char>& data) override {
    try {
      inner_->set(key, data);
    } catch (const std::exception& e) {
      MT_ERROR("distributed rendezvous: cannot publish key ", key, " in store ", spec_, ": ", e.what(),
               file_ ? ". A file store never overwrites a key: one left there by an earlier job that did not end "
                       "cleanly blocks this one. Empty that directory, or set MIXTRAIN_STORE to a fresh one"
                     : "");
    }
  }
  void forget_own_keys() override {
    if (!file_) return;  // Redis keys stay: a Redis store should be fresh (or flushed) for each job
    const std::vector<std::string> paths = file_->getAllKeyFilePaths();
    for (size_t i = forgotten_; i < paths.size(); ++i) unlink(paths[i].c_str());
    forgotten_ = paths.size();
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    return inner_->get(key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    try {
      inner_->wait(keys, timeout);
    } catch (const std::exception& e) {
      MT_ERROR("distributed rendezvous: waited ", timeout.count(), " ms in store ", spec_, " for key ",
               keys.empty() ? std::string("?") : keys.front(),
               " that another rank publishes; not every rank joined (a rank did not start, crashed, or uses ",
               "another store or world size): ", e.what());
    }
  }

 private:
  std::unique_ptr<gloo::rendezvous::Store> inner_;
  gloo::rendezvous::FileStore* file_;  // inner_ when it is a file store (its keys can be removed)
  std::string spec_;
  std::chrono::milliseconds timeout_;
  std::string owned_dir_;
  size_t forgotten_ = 0;  // getAllKeyFilePaths() only grows
};

template <class T>
void reduce_half(void* c, const void* a, const void* b, size_t n, ReduceOp op) {
  auto* out = static_cast<T*>(c);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(x[i]), v = static_cast<float>(y[i]);
    const float r = op == ReduceOp::Max ? std::max(u, v) : op == ReduceOp::Min ? std::min(u, v) : u + v;
    out[i] = T(r);
  }
}

template <class T>
gloo::AllreduceOptions::Func reduce_func(ReduceOp op) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return [op](void* c, const void* a, const void* b, size_t n) { reduce_half<T>(c, a, b, n, op); };
  } else {
    if (op == ReduceOp::Max) return static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<T>);
    if (op == ReduceOp::Min) return static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::min<T>);
    return static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>);
  }
}

template <class T>
void divide(void* data, size_t n, int by) {
  auto* p = static_cast<T*>(data);
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    for (size_t i = 0; i < n; ++i) p[i] = T(static_cast<float>(p[i]) / static_cast<float>(by));
  } else {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(by));
  }
}

template <class F>
void visit_dtype(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Float16: return f(Half{});
    case DType::BFloat16: return f(BFloat16{});
    case DType::Int32: return f(int32_t{});
    case DType::Int64: return f(int64_t{});
    default: MT_ERROR("distributed ", op, ": dtype ", dtype, " is not supported by the Gloo backend");
  }
}

class GlooBackend : public ProcessGroup::Backend {
 public:
  GlooBackend(const std::shared_ptr<KeyValueStore>& store, int rank, int size, const std::string& host,
              std::chrono::milliseconds timeout)
      : rank_(rank), size_(size) {
    auto* timed = dynamic_cast<TimedStore*>(store.get());
    MT_CHECK(timed != nullptr, "distributed: the Gloo backend needs a store made by make_store");
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      MT_ERROR("distributed: cannot open a Gloo TCP device on host \"", host, "\" (set MIXTRAIN_GLOO_HOST to ",
               "an address of this machine the other ranks can reach): ", e.what());
    }
    gloo::rendezvous::PrefixStore prefixed("mixtrain/gloo", *timed);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context_->setTimeout(timeout);
    try {
      context_->connectFullMesh(prefixed, device_);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      MT_ERROR("distributed rendezvous: rank ", rank, " of ", size, " could not connect to its peers within ",
               timeout.count(), " ms: ", e.what());
    }
    // Once every rank is connected, every rank has read every address: the keys can go, so that
    // the next job in the same store directory starts clean.
    barrier(timeout);
    timed->forget_own_keys();
  }

  const char* name() const override { return "gloo"; }

  void all_reduce(Tensor& t, ReduceOp op, std::chrono::milliseconds timeout) override {
    if (t.numel() == 0) return;
    visit_dtype(t.dtype(), "all_reduce", [&](auto zero) {
      using T = decltype(zero);
      if (size_ > 1) {
        gloo::AllreduceOptions opts(context_);
        opts.setOutput(static_cast<T*>(t.raw_data()), static_cast<size_t>(t.numel()));
        opts.setReduceFunction(reduce_func<T>(op == ReduceOp::Avg ? ReduceOp::Sum : op));
        opts.setTag(next_tag());
        opts.setTimeout(timeout);
        gloo::allreduce(opts);
      }
      if (op == ReduceOp::Avg && size_ > 1) divide<T>(t.raw_data(), static_cast<size_t>(t.numel()), size_);
    });
  }

  void broadcast(Tensor& t, int root, std::chrono::milliseconds timeout) override {
    if (t.numel() == 0 || size_ == 1) return;
    gloo::BroadcastOptions opts(context_);
    auto* p = static_cast<char*>(t.raw_data());
    if (rank_ == root) opts.setInput(p, t.nbytes());
    opts.setOutput(p, t.nbytes());
    opts.setRoot(root);
    opts.setTag(next_tag());
    opts.setTimeout(timeout);
    gloo::broadcast(opts);
  }

  void all_gather(const Tensor& t, std::vector<Tensor>& out, std::chrono::milliseconds timeout) override {
    const size_t bytes = t.nbytes();
    std::vector<char> gathered(bytes * static_cast<size_t>(size_));
    if (size_ > 1 && bytes > 0) {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(static_cast<char*>(t.raw_data()), bytes);
      opts.setOutput(gathered.data(), gathered.size());
      opts.setTag(next_tag());
      opts.setTimeout(timeout);
      gloo::allgather(opts);
    } else if (bytes > 0) {
      std::memcpy(gathered.data(), t.raw_data(), bytes);
    }
    for (int r = 0; r < size_; ++r)
      if (bytes > 0) std::memcpy(out[static_cast<size_t>(r)].raw_data(), gathered.data() + bytes * r, bytes);
  }

  void barrier(std::chrono::milliseconds timeout) override {
    if (size_ == 1) return;
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag());
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  }

 private:
  uint32_t next_tag() { return tag_++; }
  int rank_, size_;
  uint32_t tag_ = 1;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
};

}  // namespace

std::shared_ptr<KeyValueStore> make_store(const std::string& spec, std::chrono::milliseconds timeout) {
  std::unique_ptr<gloo::rendezvous::Store> inner;
  if (spec.rfind("file:", 0) == 0) {
    const std::string dir = spec.substr(5);
    MT_CHECK(!dir.empty(), "distributed: store \"", spec, "\" names no directory");
    // Gloo's FileStore needs the directory to exist; every rank may race to create it.
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      MT_ERROR("distributed: cannot create the store directory ", dir, ": ", std::strerror(errno));
    inner = std::make_unique<gloo::rendezvous::FileStore>(dir);
  } else if (spec.rfind("redis:", 0) == 0) {
#if MT_REDIS_STORE
    const std::string rest = spec.substr(6);
    const auto colon = rest.rfind(':');
    const std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
    const int port = colon == std::string::npos ? 6379 : std::atoi(rest.c_str() + colon + 1);
    MT_CHECK(!host.empty() && port > 0, "distributed: store \"", spec, "\" is not redis:host:port");
    try {
      inner = std::make_unique<gloo::rendezvous::RedisStore>(host, port);
    } catch (const std::exception& e) {
      MT_ERROR("distributed: cannot reach the Redis store at ", host, ":", port, ": ", e.what());
    }
#else
    MT_ERROR("distributed: store \"", spec, "\": this libgloo was built without Redis support");
#endif
  } else {
    MT_ERROR("distributed: store \"", spec, "\" is neither file:/dir nor redis:host:port");
  }
  return std::make_shared<TimedStore>(std::move(inner), spec, timeout);
}

std::shared_ptr<KeyValueStore> make_private_store(std::chrono::milliseconds timeout) {
  char tmpl[] = "/tmp/mixtrain-store-XXXXXX";
  MT_CHECK(mkdtemp(tmpl) != nullptr, "distributed: cannot create a store directory under /tmp: ", std::strerror(errno));
  const std::string dir = tmpl;
  return std::make_shared<TimedStore>(std::make_unique<gloo::rendezvous::FileStore>(dir), "file:" + dir, timeout, dir);
}

std::unique_ptr<ProcessGroup::Backend> make_gloo_backend(const std::shared_ptr<KeyValueStore>& store, int rank,
                                                         int world_size, const std::string& hostname,
                                                         std::chrono::milliseconds timeout) {
  return std::make_unique<GlooBackend>(store, rank, world_size, hostname, timeout);
}

#else  // no Gloo in this build

bool gloo_available() { return false; }

std::shared_ptr<KeyValueStore> make_store(const std::string&, std::chrono::milliseconds) {
  MT_ERROR("distributed: ", unavailable_reason());
}

std::shared_ptr<KeyValueStore> make_private_store(std::chrono::milliseconds) {
  MT_ERROR("distributed: ", unavailable_reason());
}

std::unique_ptr<ProcessGroup::Backend> make_gloo_backend(const std::shared_ptr<KeyValueStore>&, int, int,
                                                         const std::string&, std::chrono::milliseconds) {
  MT_ERROR("distributed: ", unavailable_reason());
}

#endif

std::string unavailable_reason() {
  std::string s;
  if (!gloo_available())
    s += "This mixtrain was built without Gloo, so CPU collectives and the rendezvous are unavailable: install "
         "libgloo-dev (Debian) and reconfigure with -DMIXTRAIN_GLOO=ON. ";
  if (!nccl_available())
    s += "This mixtrain was built without NCCL, so CUDA tensors cannot be communicated: build with "
         "-DMIXTRAIN_CUDA=ON where the CUDA toolkit and NCCL are installed.";
  return s;
}

}  // namespace mixtrain::distributed
