// Waiting on the rendezvous store, once for every kind of store: a poll with backoff until the
// keys exist or the deadline, a progress line every $MIXTRAIN_WAIT_REPORT_S seconds (10 by
// default) so a rank left alone says what it waits for, and an Error that names what was awaited,
// who has not published it, where, and the real time spent.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "distributed/store.h"
#include "mixtrain/base/error.h"

namespace mixtrain::distributed {

Deadline::Deadline(std::chrono::milliseconds t)
    : timeout(t), start(std::chrono::steady_clock::now()), end(start + t) {}

std::chrono::milliseconds Deadline::left() const {
  const auto now = std::chrono::steady_clock::now();
  return now >= end ? std::chrono::milliseconds(0)
                    : std::chrono::duration_cast<std::chrono::milliseconds>(end - now) + std::chrono::milliseconds(1);
}

double Deadline::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string Deadline::waited() const {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "waited %.2f s (timeout %g s)", elapsed_seconds(),
                static_cast<double>(timeout.count()) / 1000.0);
  return buf;
}

double wait_report_seconds() {
  const char* v = std::getenv("MIXTRAIN_WAIT_REPORT_S");
  if (!v || !*v) return 10.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  MT_CHECK(end && *end == '\0' && s > 0 && s < 1e6, "distributed: MIXTRAIN_WAIT_REPORT_S=\"", v,
           "\" is not a positive number of seconds");
  return s;
}

namespace {
// The owners of the keys present (want) or missing, the first few by name and the rest counted: a
// wait for 65,536 ranks says so in a line.
std::string join_missing(const std::vector<bool>& have, const std::vector<std::string>& owners, bool want) {
  constexpr int kNamed = 8;
  std::ostringstream os;
  int n = 0;
  for (size_t i = 0; i < have.size(); ++i) {
    if (have[i] != want) continue;
    if (n < kNamed) os << (n ? ", " : "") << (i < owners.size() ? owners[i] : "key " + std::to_string(i));
    ++n;
  }
  if (n > kNamed) os << " and " << n - kNamed << " more";
  return n ? os.str() : "none";
}
}  // namespace

void KeyValueStore::wait(const std::vector<std::string>& keys, const Deadline& deadline, const WaitFor& why) {
  const double report_every = wait_report_seconds();
  double next_report = report_every;
  auto pause = std::chrono::milliseconds(1);
  std::vector<bool> have(keys.size(), false);
  for (;;) {
    try {
      have = present(keys, deadline);
    } catch (const Error& e) {
      // The store went away mid-wait (rank 0, which serves it, ended): say what was awaited.
      MT_ERROR(e.what(), ". This rank had ", deadline.waited(), " for ", why.what, "; missing then: ",
               join_missing(have, why.owners, false));
    }
    if (why.on_poll) why.on_poll(have);
    if (std::all_of(have.begin(), have.end(), [](bool b) { return b; })) return;
    if (deadline.passed())
      MT_ERROR("distributed rendezvous: ", who, " ", deadline.waited(), " at ", describe(), " for ", why.what,
               "; missing: ", join_missing(have, why.owners, false), " (present: ", join_missing(have, why.owners, true),
               "). A rank did not start, failed before joining, or was started with another world size, ",
               "MASTER_ADDR/MASTER_PORT or store");
    if (deadline.elapsed_seconds() >= next_report) {
      std::fprintf(stderr, "mixtrain rendezvous: %s has %s at %s for %s; still missing: %s\n", who.c_str(),
                   deadline.waited().c_str(), describe().c_str(), why.what.c_str(),
                   join_missing(have, why.owners, false).c_str());
      std::fflush(stderr);
      next_report += report_every;
    }
    std::this_thread::sleep_for(std::min(pause, deadline.left()));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

std::vector<char> KeyValueStore::get(const std::string& key, const Deadline& deadline, const WaitFor& why) {
  wait({key}, deadline, why);
  return get_now(key, deadline);
}

bool KeyValueStore::set_if_absent(const std::string& key, const std::vector<char>&, const Deadline&) {
  MT_ERROR("distributed: the store at ", describe(), " cannot set key ", key,
           " only if absent (elastic training needs a TCP, file or Redis store)");
}

PrefixStore::PrefixStore(std::shared_ptr<KeyValueStore> inner, std::string prefix)
    : inner_(std::move(inner)), prefix_(std::move(prefix)) {
  who = inner_->who;
}

void PrefixStore::set(const std::string& key, const std::vector<char>& value, const Deadline& deadline) {
  inner_->set(prefix_ + key, value, deadline);
}

bool PrefixStore::set_if_absent(const std::string& key, const std::vector<char>& value, const Deadline& deadline) {
  return inner_->set_if_absent(prefix_ + key, value, deadline);
}

std::vector<bool> PrefixStore::present(const std::vector<std::string>& keys, const Deadline& deadline) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(prefix_ + k);
  return inner_->present(full, deadline);
}

std::vector<char> PrefixStore::get_now(const std::string& key, const Deadline& deadline) {
  return inner_->get_now(prefix_ + key, deadline);
}

std::string PrefixStore::describe() const { return inner_->describe() + " under " + prefix_; }

}  // namespace mixtrain::distributed
