// ProcessGroup: routes each collective to the Gloo (CPU) or NCCL (CUDA) backend and runs it on
// the group's communication thread; failures become Errors that name the collective, the ranks
// and the timeout, and leave the group refusing further calls (its peers are out of step).
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <mutex>
#include <thread>

#include "distributed/internal.h"
#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"

namespace mixtrain::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

void Work::State::finish(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    error = std::move(e);
    done = true;
  }
  cv.notify_all();
}

void Work::wait() const {
  MT_CHECK(state_ != nullptr, "Work.wait: an empty work handle");
  std::unique_lock<std::mutex> lock(state_->mutex);
  // The collective itself is bounded by the group's timeout; meanwhile a long wait says so.
  const auto every = std::chrono::duration<double>(wait_report_seconds());
  const auto start = std::chrono::steady_clock::now();
  while (!state_->cv.wait_for(lock, every, [&] { return state_->done; })) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "mixtrain: still waiting for distributed %s after %.0f s\n", state_->what.c_str(), s);
    std::fflush(stderr);
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::is_completed() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

struct CommThread::Impl {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::pair<std::function<void()>, std::shared_ptr<Work::State>>> queue;
  bool stop = false;
  std::thread thread;

  void run() {
    for (;;) {
      std::pair<std::function<void()>, std::shared_ptr<Work::State>> item;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        item = std::move(queue.front());
        queue.erase(queue.begin());
      }
      std::exception_ptr error;
      try {
        item.first();
      } catch (...) {
        error = std::current_exception();
      }
      item.second->finish(error);
    }
  }
};

CommThread::CommThread() : impl_(std::make_unique<Impl>()) {
  impl_->thread = std::thread([this] { impl_->run(); });
}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

Work CommThread::enqueue(std::function<void()> fn, std::string what) {
  auto state = std::make_shared<Work::State>();
  state->what = std::move(what);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->queue.emplace_back(std::move(fn), state);
  }
  impl_->cv.notify_one();
  return Work(state);
}

std::string describe(const char* op, const Tensor* t, int rank, int world_size) {
  std::ostringstream os;
  os << op;
  if (t) os << "(" << t->dtype() << " " << shape_str(t->shape()) << " on " << t->device() << ")";
  os << " on rank " << rank << " of " << world_size;
  if (world_size > 1) {
    os << " (peer ranks";
    for (int r = 0; r < world_size; ++r)
      if (r != rank) os << " " << r;
    os << ")";
  }
  return os.str();
}

void check_dense(const Tensor& t, const char* op) {
  MT_CHECK(t.defined(), "distributed ", op, ": undefined tensor");
  MT_CHECK(t.dtype() != DType::Bool, "distributed ", op, ": ", t.str(), ": bool tensors are not supported (use int32)");
  MT_CHECK(t.is_dense(), "distributed ", op, ": ", t.str(),
           " is not dense (a strided view); pass a contiguous tensor (t.contiguous())");
}

// The first failure's description, written by the communication thread or abort() and read by
// any thread.
struct ProcessGroup::Failure {
  mutable std::mutex mutex;
  std::string what;
  std::string get() const {
    std::lock_guard<std::mutex> lock(mutex);
    return what;
  }
  void set_first(const std::string& w) {
    std::lock_guard<std::mutex> lock(mutex);
    if (what.empty()) what = w;
  }
};

std::string ProcessGroup::failure() const { return failure_->get(); }

ProcessGroup::ProcessGroup(const LaunchEnv& env, std::chrono::milliseconds timeout, std::unique_ptr<Backend> cpu,
                           std::shared_ptr<KeyValueStore> store, bool check_collectives,
                           std::vector<std::string> rank_addresses)
    : env_(env),
      timeout_(timeout),
      store_(std::move(store)),
      cpu_(std::move(cpu)),
      comm_(std::make_unique<CommThread>()),
      failure_(std::make_shared<Failure>()),
      check_collectives_(check_collectives),
      rank_addresses_(std::move(rank_addresses)) {}

ProcessGroup::~ProcessGroup() {
  comm_.reset();  // drains the queue before the backends go
}

RankShares ProcessGroup::rank_shares() const {
  std::lock_guard<std::mutex> lock(shares_mutex_);
  return shares_;
}

void ProcessGroup::set_rank_shares(RankShares shares) {
  if (!shares.weights.empty()) check_rank_weights(shares.weights, env_.world_size, "ProcessGroup.set_rank_shares: weights");
  std::lock_guard<std::mutex> lock(shares_mutex_);
  shares_ = std::move(shares);
}

void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  MT_CHECK(timeout.count() > 0, "ProcessGroup.set_timeout: the timeout must be positive, got ", timeout.count(),
           " ms");
  timeout_ = timeout;
}

void ProcessGroup::abort(const std::string& reason) {
  failure_->set_first(reason.empty() ? std::string("aborted") : reason);
  comm_.reset();  // what is queued fails without running (submit's check); a running call ends
  cpu_.reset();   // closes this rank's connections: peers waiting on it fail now, not at their timeout
  cuda_.reset();
}

ProcessGroup::Backend& ProcessGroup::backend_for(const Tensor& t, const char* op) {
  const std::string failed = failure();
  MT_CHECK(failed.empty(), "distributed ", op, ": the process group is unusable after an earlier failure (", failed,
           "); the ranks are out of step, so the job has to stop");
  if (t.device().type == DeviceType::CUDA) {
    MT_CHECK(cuda_refusal_.empty(), "distributed ", op, ": ", t.str(), ": ", cuda_refusal_);
    if (!cuda_) {
      MT_CHECK(store_ != nullptr, "distributed ", op, ": CUDA tensors need a rendezvous store for NCCL");
      cuda_ = make_nccl_backend(*store_, env_, timeout_);
    }
    return *cuda_;
  }
  MT_CHECK(cpu_ != nullptr, "distributed ", op, ": no CPU backend in this process group. ", unavailable_reason());
  return *cpu_;
}

namespace {

std::string with_op(const char* name, ReduceOp op) { return std::string(name) + "[" + reduce_op_name(op) + "]"; }

// What a rank is about to call, as numbers every rank can compare: kind, reduce op or root, and
// the tensor's dtype, device type, element count, rank and first four sizes.
enum Kind : int64_t { kAllReduce = 1, kBroadcast, kAllGather, kBarrier, kReduceScatter, kAllGatherInto };
constexpr size_t kSignatureSize = 11;

std::vector<int64_t> signature(Kind kind, int64_t op_or_root, const Tensor* t) {
  std::vector<int64_t> s(kSignatureSize, -1);
  s[0] = kind;
  s[1] = op_or_root;
  if (t) {
    s[2] = static_cast<int64_t>(t->dtype());
    s[3] = static_cast<int64_t>(t->device().type);
    s[4] = t->numel();
    s[5] = t->dim();
    uint64_t h = 1469598103934665603ull;
    for (int64_t d = 0; d < t->dim(); ++d) {
      if (d < 4) s[static_cast<size_t>(6 + d)] = t->size(d);
      h = (h ^ static_cast<uint64_t>(t->size(d))) * 1099511628211ull;
    }
    s[10] = static_cast<int64_t>(h >> 1);
  }
  return s;
}

std::string describe_signature(const std::vector<int64_t>& s) {
  std::ostringstream os;
  switch (s[0]) {
    case kAllReduce: os << "all_reduce[" << reduce_op_name(static_cast<ReduceOp>(s[1])) << "]"; break;
    case kBroadcast: os << "broadcast(root " << s[1] << ")"; break;
    case kAllGather: os << "all_gather"; break;
    case kBarrier: return "barrier";
    case kReduceScatter: os << "reduce_scatter[" << reduce_op_name(static_cast<ReduceOp>(s[1])) << "]"; break;
    case kAllGatherInto: os << "all_gather_into_tensor"; break;
    default: return "an unknown collective";
  }
  os << "(" << static_cast<DType>(s[2]) << " [";
  for (int64_t d = 0; d < std::min<int64_t>(s[5], 4); ++d) os << (d ? ", " : "") << s[static_cast<size_t>(6 + d)];
  if (s[5] > 4) os << ", ...";
  os << "], " << s[4] << " elements, on " << (s[3] == static_cast<int64_t>(DeviceType::CUDA) ? "cuda" : "cpu") << ")";
  return os.str();
}

// Every rank's signature, compared: a rank that is about to call something else stops every
// rank here, before the transport sees buffers of different sizes or types.
void check_signatures(ProcessGroup::Backend& cpu, const std::vector<int64_t>& mine, int rank, int world,
                      std::chrono::milliseconds timeout) {
  const int64_t n = static_cast<int64_t>(mine.size());
  const Tensor t = from_vector(mine, {n}, TensorOptions(kInt64));
  std::vector<Tensor> all;
  for (int r = 0; r < world; ++r) all.push_back(Tensor::empty({n}, TensorOptions(kInt64)));
  cpu.all_gather(t, all, timeout);
  for (int r = 0; r < world; ++r) {
    const std::vector<int64_t> theirs = all[static_cast<size_t>(r)].to_vector<int64_t>();
    if (theirs == mine) continue;
    throw CollectiveMismatch("rank " + std::to_string(r) + " called " + describe_signature(theirs) + " where rank " +
                             std::to_string(rank) + " called " + describe_signature(mine) +
                             ". Every rank must issue the same collectives, with the same dtypes and shapes, in the "
                             "same order");
  }
}

}  // namespace

std::string ProcessGroup::ranks_behind(const std::string& message) const {
  // Gloo names a pair by its address ("[10.0.0.2]:41234"): say which ranks advertised it.
  std::ostringstream os;
  std::vector<std::string> done;
  for (const auto& addr : rank_addresses_) {
    if (addr.empty() || std::find(done.begin(), done.end(), addr) != done.end()) continue;
    done.push_back(addr);
    if (message.find("[" + addr + "]") == std::string::npos) continue;
    os << " (" << addr << " is rank";
    for (size_t r = 0; r < rank_addresses_.size(); ++r)
      if (rank_addresses_[r] == addr && static_cast<int>(r) != rank()) os << " " << r;
    os << ")";
  }
  return os.str();
}

Work ProcessGroup::submit(std::string what, std::vector<int64_t> sig, std::function<void()> fn) {
  const std::string failed = failure();
  MT_CHECK(failed.empty() && comm_, "distributed ", what, ": the process group is unusable after an earlier failure (",
           failed.empty() ? std::string("aborted") : failed, "); the ranks are out of step, so the job has to stop");
  const auto timeout = timeout_;
  auto failure = failure_;
  Backend* cpu = check_collectives_ && !sig.empty() && world_size() > 1 ? cpu_.get() : nullptr;
  const int rank = this->rank(), world = world_size();
  std::string label = what;
  return comm_->enqueue(
      [this, what = std::move(what), sig = std::move(sig), fn = std::move(fn), timeout, failure, cpu, rank, world] {
        const auto start = std::chrono::steady_clock::now();
        // Queued behind a collective that failed (or an abort): the peers are out of step, so
        // this one fails at once instead of waiting out its timeout.
        const std::string earlier = failure->get();
        if (!earlier.empty())
          throw Error("distributed " + what + ": not run, the group failed earlier: " + earlier);
        try {
          if (cpu) check_signatures(*cpu, sig, rank, world, timeout);
          fn();
        } catch (const CollectiveMismatch& e) {
          const std::string message = "distributed " + what + ": " + e.what();
          failure->set_first(message);
          throw Error(message);
        } catch (...) {
          std::string reason = "unknown exception";
          try {
            throw;
          } catch (const std::exception& e) {
            reason = e.what();
          } catch (...) {
          }
          char took[64];
          std::snprintf(took, sizeof(took), "%.2f s",
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          std::ostringstream os;
          os << "distributed " << what << " failed after " << took << " (timeout " << timeout.count()
             << " ms): " << reason << ranks_behind(reason)
             << ". A peer rank died, or stopped calling collectives, or called them in another order";
          failure->set_first(os.str());
          throw Error(os.str());
        }
      },
      std::move(label));
}

Work ProcessGroup::all_reduce_impl(const Tensor& tensor, ReduceOp op, bool check) {
  check_dense(tensor, "all_reduce");
  Backend& b = backend_for(tensor, "all_reduce");
  const auto timeout = timeout_;
  Tensor t = tensor;
  return submit(describe(with_op("all_reduce", op).c_str(), &tensor, rank(), world_size()),
                check ? signature(kAllReduce, static_cast<int64_t>(op), &tensor) : std::vector<int64_t>{},
                [&b, t, op, timeout]() mutable { b.all_reduce(t, op, timeout); });
}

Work ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op) { return all_reduce_impl(tensor, op, true); }

void ProcessGroup::all_reduce(Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op).wait(); }

Work ProcessGroup::broadcast_impl(const Tensor& tensor, int root, bool check) {
  check_dense(tensor, "broadcast");
  MT_CHECK(root >= 0 && root < world_size(), "distributed broadcast: root ", root, " is not a rank of a group of ",
           world_size());
  Backend& b = backend_for(tensor, "broadcast");
  const auto timeout = timeout_;
  Tensor t = tensor;
  return submit(describe("broadcast", &tensor, rank(), world_size()),
                check ? signature(kBroadcast, root, &tensor) : std::vector<int64_t>{},
                [&b, t, root, timeout]() mutable { b.broadcast(t, root, timeout); });
}

Work ProcessGroup::broadcast_async(const Tensor& tensor, int root) { return broadcast_impl(tensor, root, true); }

void ProcessGroup::broadcast(Tensor& tensor, int root) { broadcast_async(tensor, root).wait(); }

Work ProcessGroup::all_gather_async(const Tensor& tensor, std::shared_ptr<std::vector<Tensor>> out) {
  check_dense(tensor, "all_gather");
  MT_CHECK(out != nullptr, "distributed all_gather: null output list");
  Backend& b = backend_for(tensor, "all_gather");
  out->clear();
  for (int r = 0; r < world_size(); ++r) out->push_back(Tensor::empty(tensor.shape(), tensor.options()));
  const auto timeout = timeout_;
  Tensor t = tensor.contiguous();
  return submit(describe("all_gather", &tensor, rank(), world_size()), signature(kAllGather, 0, &tensor),
                [&b, t, out, timeout] { b.all_gather(t, *out, timeout); });
}

std::vector<Tensor> ProcessGroup::all_gather(const Tensor& tensor) {
  auto out = std::make_shared<std::vector<Tensor>>();
  all_gather_async(tensor, out).wait();
  return *out;
}

Work ProcessGroup::barrier_async() {
  const std::string failed = failure();
  MT_CHECK(failed.empty(), "distributed barrier: the process group is unusable after an earlier failure (", failed,
           "); the ranks are out of step, so the job has to stop");
  MT_CHECK(cpu_ != nullptr || cuda_ != nullptr, "distributed barrier: no backend. ", unavailable_reason());
  Backend& b = cpu_ ? *cpu_ : *cuda_;
  const auto timeout = timeout_;
  return submit(describe("barrier", nullptr, rank(), world_size()), signature(kBarrier, 0, nullptr),
                [&b, timeout] { b.barrier(timeout); });
}

void ProcessGroup::barrier() { barrier_async().wait(); }

namespace {
// ZeRO's pair: `whole` has world chunks of `chunk`'s size, one dtype and device.
void check_chunks(const char* op, const Tensor& whole, const Tensor& chunk, int world, const char* whole_name,
                  const char* chunk_name) {
  check_dense(whole, op);
  check_dense(chunk, op);
  MT_CHECK(whole.dtype() == chunk.dtype() && whole.device() == chunk.device(), "distributed ", op, ": ", whole_name,
           " ", whole.str(), " and ", chunk_name, " ", chunk.str(), " differ in dtype or device");
  MT_CHECK(whole.numel() == chunk.numel() * world, "distributed ", op, ": ", whole_name, " ", whole.str(), " must hold ",
           world, " chunks of ", chunk_name, "'s ", chunk.numel(), " elements (one per rank)");
}
}  // namespace

Work ProcessGroup::reduce_scatter_impl(const Tensor& output, const Tensor& input, ReduceOp op, bool check) {
  check_chunks("reduce_scatter", input, output, world_size(), "input", "output");
  Backend& b = backend_for(input, "reduce_scatter");
  const auto timeout = timeout_;
  Tensor in = input, out = output;
  return submit(describe(with_op("reduce_scatter", op).c_str(), &input, rank(), world_size()),
                check ? signature(kReduceScatter, static_cast<int64_t>(op), &input) : std::vector<int64_t>{},
                [&b, in, out, op, timeout]() mutable { b.reduce_scatter(in, out, op, timeout); });
}

Work ProcessGroup::reduce_scatter_tensor_async(const Tensor& output, const Tensor& input, ReduceOp op) {
  return reduce_scatter_impl(output, input, op, true);
}

void ProcessGroup::reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op) {
  reduce_scatter_tensor_async(output, input, op).wait();
}

Work ProcessGroup::all_gather_into_impl(const Tensor& output, const Tensor& input, bool check) {
  check_chunks("all_gather_into_tensor", output, input, world_size(), "output", "input");
  Backend& b = backend_for(input, "all_gather_into_tensor");
  const auto timeout = timeout_;
  Tensor in = input, out = output;
  return submit(describe("all_gather_into_tensor", &output, rank(), world_size()),
                check ? signature(kAllGatherInto, 0, &output) : std::vector<int64_t>{},
                [&b, in, out, timeout]() mutable { b.all_gather_into(in, out, timeout); });
}

Work ProcessGroup::all_gather_into_tensor_async(const Tensor& output, const Tensor& input) {
  return all_gather_into_impl(output, input, true);
}

void ProcessGroup::all_gather_into_tensor(Tensor& output, const Tensor& input) {
  all_gather_into_tensor_async(output, input).wait();
}

}  // namespace mixtrain::distributed
