#pragma once
// The rendezvous key-value store every backend (Gloo and NCCL) meets its peers through, and the
// deadline that bounds each wait on it: the interface and its waiting (store.cpp), a prefixed
// view (store.cpp), the file and Redis stores (file_redis_store.cpp); the TCP store rank 0 serves
// is tcp_store.h.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mixtrain::distributed {

// One operation's time limit: every wait inside it ends at the same point, so a rendezvous of
// several phases is bounded by its timeout in all, and messages can give the real time spent.
struct Deadline {
  explicit Deadline(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout;
  std::chrono::steady_clock::time_point start, end;
  std::chrono::milliseconds left() const;  // 0 once passed
  bool passed() const { return std::chrono::steady_clock::now() >= end; }
  double elapsed_seconds() const;
  // "waited 3.01 s (timeout 3 s)"
  std::string waited() const;
};

// Seconds between the progress lines of a long wait ($MIXTRAIN_WAIT_REPORT_S, default 10).
double wait_report_seconds();

// What a wait is for, in the words of its messages.
struct WaitFor {
  std::string what;                 // "every rank to join"
  std::vector<std::string> owners;  // per key: who publishes it ("rank 3")
  // Called with the keys present at each poll (may throw: a peer that joined with another world
  // size ends the wait at once instead of at the timeout).
  std::function<void(const std::vector<bool>&)> on_poll;
};

// The rendezvous key-value store: served by rank 0 over TCP (tcp_store.h), Gloo's file store (one
// host, or a shared file system) or Gloo's Redis store. The waiting is done in store.cpp, once for all
// of them: polls until the keys exist or the deadline, with progress lines on stderr.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // The deadline bounds the store's own I/O (a TCP store whose server stopped answering).
  virtual void set(const std::string& key, const std::vector<char>& value, const Deadline& deadline) = 0;
  // Sets the key unless it exists, atomically: of several processes racing, exactly one sees
  // true. The elastic agent decides a generation's membership this way (first writer wins).
  virtual bool set_if_absent(const std::string& key, const std::vector<char>& value, const Deadline& deadline);
  // Which of the keys exist now; does not wait for them.
  virtual std::vector<bool> present(const std::vector<std::string>& keys, const Deadline& deadline) = 0;
  // The value of a key that exists.
  virtual std::vector<char> get_now(const std::string& key, const Deadline& deadline) = 0;
  // "tcp://10.0.0.1:29500 (served by rank 0)", "file:/dir", ...
  virtual std::string describe() const = 0;
  // Removes the keys this process set, once every peer has read them. Gloo's file store never
  // overwrites a key, so keys left behind by a finished job would break the next job that
  // rendezvouses in the same directory. (The TCP store goes with rank 0's group.)
  virtual void forget_own_keys() {}
  // Whether the keys end with the job (the TCP store rank 0 serves): then a rank whose rendezvous
  // fails may leave a note for the others there, which a store outliving the job must not keep.
  virtual bool ends_with_job() const { return false; }
  // This process serves the store to the others (rank 0 of a TCP store).
  virtual bool serves_others() const { return false; }

  // Every key exists, or an Error naming what was waited for, who has not published, where,
  // and the time spent.
  void wait(const std::vector<std::string>& keys, const Deadline& deadline, const WaitFor& why);
  std::vector<char> get(const std::string& key, const Deadline& deadline, const WaitFor& why);

  // "rank 1 of 4", for messages.
  std::string who;
};

// A view of another store with every key under a prefix: the elastic agent's generations each
// rendezvous under their own ("mixtrain/elastic/g3/"), so no key is ever written twice (Gloo's file
// store refuses that) and a generation never reads an older one's keys.
class PrefixStore : public KeyValueStore {
 public:
  PrefixStore(std::shared_ptr<KeyValueStore> inner, std::string prefix);
  void set(const std::string& key, const std::vector<char>& value, const Deadline& deadline) override;
  bool set_if_absent(const std::string& key, const std::vector<char>& value, const Deadline& deadline) override;
  std::vector<bool> present(const std::vector<std::string>& keys, const Deadline& deadline) override;
  std::vector<char> get_now(const std::string& key, const Deadline& deadline) override;
  std::string describe() const override;
  void forget_own_keys() override { inner_->forget_own_keys(); }
  bool ends_with_job() const override { return inner_->ends_with_job(); }
  bool serves_others() const override { return inner_->serves_others(); }

 private:
  std::shared_ptr<KeyValueStore> inner_;
  std::string prefix_;
};

// The file and Redis stores, on Gloo's implementations of them (file_redis_store.cpp; throw the
// reason when this build has no Gloo): spec "file:/dir" or "redis://host:port" ("redis:host:port");
// prefix goes before every key.
std::shared_ptr<KeyValueStore> make_file_or_redis_store(const std::string& spec, const std::string& prefix);
// A file store in a new directory of its own under $TMPDIR (or /tmp), removed with the store: a
// process alone (world size 1, no launcher) rendezvouses with nobody, so it shares no directory.
std::shared_ptr<KeyValueStore> make_private_store();

}  // namespace mixtrain::distributed
