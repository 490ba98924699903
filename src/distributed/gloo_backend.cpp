// The Gloo backend: rendezvous through our store (the adapter below), a full mesh of TCP pairs, and
// Gloo's ring all-reduce, broadcast, all-gather and barrier on CPU tensors. Built only when
// libgloo was found (MIXTRAIN_HAVE_GLOO); otherwise every entry point explains what is missing.
#include "distributed/internal.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/half.h"

#if MIXTRAIN_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstring>
#endif

namespace mixtrain::distributed {

#if MIXTRAIN_HAVE_GLOO

bool gloo_available() { return true; }

namespace {

// Gloo's rendezvous on our store: its keys under a prefix, and every wait ending at the
// rendezvous's deadline (Gloo's own stores wait 30 s whatever the context's timeout), with our
// messages: which rank's address is missing, and for how long it was awaited.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(KeyValueStore& store, const Deadline& deadline) : store_(store), deadline_(deadline) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(kPrefix + key, data, deadline_);
  }
  std::vector<char> get(const std::string& key) override {
    return store_.get(kPrefix + key, deadline_, why({key}));
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, deadline_.timeout); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(kPrefix + k);
    store_.wait(full, deadline_, why(keys));
  }

 private:
  static constexpr const char* kPrefix = "mixtrain/gloo/";
  // connectFullMesh's keys are the ranks that publish them.
  static WaitFor why(const std::vector<std::string>& keys) {
    WaitFor w;
    w.what = "the Gloo address of every peer";
    for (const auto& k : keys) w.owners.push_back("rank " + k);
    return w;
  }
  KeyValueStore& store_;
  const Deadline& deadline_;
};

// Gloo's own collectives use slot prefixes 0x01 to 0x08 (gloo/types.h).
constexpr uint8_t kReduceScatterSlotPrefix = 0x41;

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
  GlooBackend(KeyValueStore& store, int rank, int size, const GlooAddress& address, const Deadline& deadline)
      : rank_(rank), size_(size) {
    gloo::transport::tcp::attr attr;
    attr.hostname = address.hostname;
    attr.iface = address.iface;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      MT_ERROR("distributed: cannot open a Gloo TCP device on ", address.describe(), " (set GLOO_SOCKET_IFNAME to ",
               "the interface, or MIXTRAIN_GLOO_HOST to the address of this host, that the other ranks reach): ",
               e.what());
    }
    GlooStoreAdapter adapter(store, deadline);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
    try {
      context_->setTimeout(std::max(deadline.left(), std::chrono::milliseconds(1)));
      context_->connectFullMesh(adapter, device_);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      MT_ERROR("distributed rendezvous: rank ", rank, " of ", size, " (Gloo on ", address.describe(),
               ") could not connect to its peers: ", deadline.waited(), ": ", e.what(),
               ". A peer's address is not reachable from here: set GLOO_SOCKET_IFNAME or MIXTRAIN_GLOO_HOST");
    }
    // Once every rank is connected, every rank has read every address: the keys can go, so that
    // the next job in the same store starts clean.
    try {
      barrier(std::max(deadline.left(), std::chrono::milliseconds(1)));
    } catch (const std::exception& e) {
      MT_ERROR("distributed rendezvous: rank ", rank, " of ", size, ": the barrier after connecting failed, ",
               deadline.waited(), ": ", e.what());
    }
    store.forget_own_keys();
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

  // A ring: at step s (0 to N-2) rank r sends its running sum of chunk r-s-1 to rank r+1 and adds
  // what rank r-1 sends of chunk r-s-2 into its own, so after N-1 steps chunk r holds every
  // rank's values (in the order r+1, r+2, ..., r). Each rank sends (N-1)/N of the buffer, the
  // first half of a ring all-reduce. This libgloo's only reduce-scatter is the old algorithm API
  // (ReduceScatterHalvingDoubling), bound to the context's timeout, so it is written here on
  // Gloo's unbound buffers with the call's own.
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op, std::chrono::milliseconds timeout) override {
    const size_t chunk_bytes = output.nbytes();
    char* data = static_cast<char*>(input.raw_data());
    char* mine = data + chunk_bytes * static_cast<size_t>(rank_);
    visit_dtype(input.dtype(), "reduce_scatter", [&](auto zero) {
      using T = decltype(zero);
      const size_t n = static_cast<size_t>(output.numel());
      if (size_ > 1 && n > 0) {
        const auto reduce = reduce_func<T>(op == ReduceOp::Avg ? ReduceOp::Sum : op);
        std::vector<T> incoming(n);
        auto send = context_->createUnboundBuffer(data, input.nbytes());
        auto recv = context_->createUnboundBuffer(incoming.data(), chunk_bytes);
        const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, next_tag());
        const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
        for (int s = 0; s + 1 < size_; ++s) {
          const size_t out_chunk = static_cast<size_t>((rank_ - s - 1 + 2 * size_) % size_);
          const size_t in_chunk = static_cast<size_t>((rank_ - s - 2 + 2 * size_) % size_);
          send->send(next, slot, out_chunk * chunk_bytes, chunk_bytes);
          recv->recv(prev, slot, 0, chunk_bytes);
          MT_CHECK(recv->waitRecv(timeout), "reduce_scatter: receiving from rank ", prev, " was aborted");
          T* acc = reinterpret_cast<T*>(data + in_chunk * chunk_bytes);
          reduce(acc, acc, incoming.data(), n);
          MT_CHECK(send->waitSend(timeout), "reduce_scatter: sending to rank ", next, " was aborted");
        }
      }
      if (op == ReduceOp::Avg && size_ > 1) divide<T>(mine, n, size_);
    });
    if (output.raw_data() != mine && chunk_bytes > 0) std::memcpy(output.raw_data(), mine, chunk_bytes);
  }

  void all_gather_into(const Tensor& input, Tensor& output, std::chrono::milliseconds timeout) override {
    const size_t bytes = input.nbytes();
    char* out = static_cast<char*>(output.raw_data());
    char* mine = out + bytes * static_cast<size_t>(rank_);
    if (size_ == 1 || bytes == 0) {
      if (mine != input.raw_data() && bytes > 0) std::memcpy(mine, input.raw_data(), bytes);
      return;
    }
    gloo::AllgatherOptions opts(context_);
    // Without an input Gloo gathers in place: this rank's chunk is already where it belongs.
    if (mine != input.raw_data()) opts.setInput(static_cast<char*>(input.raw_data()), bytes);
    opts.setOutput(out, output.nbytes());
    opts.setTag(next_tag());
    opts.setTimeout(timeout);
    gloo::allgather(opts);
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

std::unique_ptr<ProcessGroup::Backend> make_gloo_backend(KeyValueStore& store, int rank, int world_size,
                                                         const GlooAddress& address, const Deadline& deadline) {
  return std::make_unique<GlooBackend>(store, rank, world_size, address, deadline);
}

#else  // no Gloo in this build

bool gloo_available() { return false; }

std::unique_ptr<ProcessGroup::Backend> make_gloo_backend(KeyValueStore&, int, int, const GlooAddress&,
                                                         const Deadline&) {
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
