// ProcessGroup: routes each collective to the Gloo (CPU) or NCCL (CUDA) backend and runs it on
// the group's communication thread; failures become Errors that name the collective, the ranks
// and the timeout, and leave the group refusing further calls (its peers are out of step).
#include <sstream>
#include <thread>

#include "distributed/internal.h"
#include "mixtrain/core/error.h"
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
  state_->cv.wait(lock, [&] { return state_->done; });
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

Work CommThread::enqueue(std::function<void()> fn) {
  auto state = std::make_shared<Work::State>();
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

ProcessGroup::ProcessGroup(const LaunchEnv& env, std::chrono::milliseconds timeout, std::unique_ptr<Backend> cpu,
                           std::shared_ptr<KeyValueStore> store)
    : env_(env),
      timeout_(timeout),
      store_(std::move(store)),
      cpu_(std::move(cpu)),
      comm_(std::make_unique<CommThread>()),
      failure_(std::make_shared<std::string>()) {}

ProcessGroup::~ProcessGroup() {
  comm_.reset();  // drains the queue before the backends go
}

void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  MT_CHECK(timeout.count() > 0, "ProcessGroup.set_timeout: the timeout must be positive, got ", timeout.count(),
           " ms");
  timeout_ = timeout;
}

ProcessGroup::Backend& ProcessGroup::backend_for(const Tensor& t, const char* op) {
  if (t.device().type == DeviceType::CUDA) {
    if (!cuda_) {
      MT_CHECK(store_ != nullptr, "distributed ", op, ": CUDA tensors need a rendezvous store for NCCL");
      cuda_ = make_nccl_backend(*store_, env_, timeout_);
    }
    return *cuda_;
  }
  MT_CHECK(cpu_ != nullptr, "distributed ", op, ": no CPU backend in this process group. ", unavailable_reason());
  return *cpu_;
}

Work ProcessGroup::submit(std::string what, std::function<void()> fn) {
  MT_CHECK(failure_->empty(), "distributed ", what, ": the process group is unusable after an earlier failure (",
           *failure_, "); the ranks are out of step, so the job has to stop");
  const auto timeout = timeout_;
  auto failure = failure_;
  return comm_->enqueue([what = std::move(what), fn = std::move(fn), timeout, failure] {
    try {
      fn();
    } catch (const std::exception& e) {
      std::ostringstream os;
      os << "distributed " << what << " failed (timeout " << timeout.count() << " ms): " << e.what()
         << ". A peer rank died, or stopped calling collectives, or called them in another order";
      *failure = what;
      throw Error(os.str());
    }
  });
}

namespace {
std::string with_op(const char* name, ReduceOp op) { return std::string(name) + "[" + reduce_op_name(op) + "]"; }
}  // namespace

Work ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  check_dense(tensor, "all_reduce");
  Backend& b = backend_for(tensor, "all_reduce");
  const auto timeout = timeout_;
  Tensor t = tensor;
  return submit(describe(with_op("all_reduce", op).c_str(), &tensor, rank(), world_size()),
                [&b, t, op, timeout]() mutable { b.all_reduce(t, op, timeout); });
}

void ProcessGroup::all_reduce(Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op).wait(); }

Work ProcessGroup::broadcast_async(const Tensor& tensor, int root) {
  check_dense(tensor, "broadcast");
  MT_CHECK(root >= 0 && root < world_size(), "distributed broadcast: root ", root, " is not a rank of a group of ",
           world_size());
  Backend& b = backend_for(tensor, "broadcast");
  const auto timeout = timeout_;
  Tensor t = tensor;
  return submit(describe("broadcast", &tensor, rank(), world_size()),
                [&b, t, root, timeout]() mutable { b.broadcast(t, root, timeout); });
}

void ProcessGroup::broadcast(Tensor& tensor, int root) { broadcast_async(tensor, root).wait(); }

Work ProcessGroup::all_gather_async(const Tensor& tensor, std::shared_ptr<std::vector<Tensor>> out) {
  check_dense(tensor, "all_gather");
  MT_CHECK(out != nullptr, "distributed all_gather: null output list");
  Backend& b = backend_for(tensor, "all_gather");
  out->clear();
  for (int r = 0; r < world_size(); ++r) out->push_back(Tensor::empty(tensor.shape(), tensor.options()));
  const auto timeout = timeout_;
  Tensor t = tensor.contiguous();
  return submit(describe("all_gather", &tensor, rank(), world_size()),
                [&b, t, out, timeout] { b.all_gather(t, *out, timeout); });
}

std::vector<Tensor> ProcessGroup::all_gather(const Tensor& tensor) {
  auto out = std::make_shared<std::vector<Tensor>>();
  all_gather_async(tensor, out).wait();
  return *out;
}

Work ProcessGroup::barrier_async() {
  MT_CHECK(cpu_ != nullptr || cuda_ != nullptr, "distributed barrier: no backend. ", unavailable_reason());
  Backend& b = cpu_ ? *cpu_ : *cuda_;
  const auto timeout = timeout_;
  return submit(describe("barrier", nullptr, rank(), world_size()), [&b, timeout] { b.barrier(timeout); });
}

void ProcessGroup::barrier() { barrier_async().wait(); }

}  // namespace mixtrain::distributed
