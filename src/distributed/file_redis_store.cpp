// The file store (a directory every rank reaches: one host, or a shared file system) and the
// Redis store (a redis-server every rank reaches) as rendezvous stores for any backend, NCCL's
// too, on Gloo's implementations of them. Both refuse to overwrite a key, so each rank removes
// the keys it set once every rank has read them.
#include "distributed/internal.h"
#include "mixtrain/base/error.h"

#if MIXTRAIN_HAVE_GLOO
#include <gloo/config.h>
#include <gloo/rendezvous/file_store.h>
#if GLOO_USE_REDIS && defined(MIXTRAIN_GLOO_REDIS)
#define MT_REDIS_STORE 1
#include <gloo/rendezvous/redis_store.h>
#endif
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#endif

namespace mixtrain::distributed {

#if MIXTRAIN_HAVE_GLOO

namespace {

// Gloo's check() is protected in its file store.
struct FileStore : gloo::rendezvous::FileStore {
  using gloo::rendezvous::FileStore::FileStore;
  bool has(const std::string& key) { return check({key}); }
  // Gloo's set() checks and renames, which two writers can both pass; link() of a complete file
  // to the key's path fails for all but one. The file is where Gloo's get() reads the key.
  bool set_if_absent(const std::string& key, const std::vector<char>& data) {
    const std::string tmp = tmpPath(key) + "." + std::to_string(getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    MT_CHECK(fd >= 0, "cannot create ", tmp, ": ", std::strerror(errno));
    const bool written = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
    ::close(fd);
    if (!written) {
      ::unlink(tmp.c_str());
      MT_ERROR("cannot write ", tmp, ": ", std::strerror(errno));
    }
    const int rc = ::link(tmp.c_str(), objectPath(key).c_str());
    const int err = errno;
    ::unlink(tmp.c_str());
    MT_CHECK(rc == 0 || err == EEXIST, "cannot link ", objectPath(key), ": ", std::strerror(err));
    return rc == 0;
  }
};

#if MT_REDIS_STORE
struct RedisStore : gloo::rendezvous::RedisStore {
  using gloo::rendezvous::RedisStore::RedisStore;
  bool has(const std::string& key) { return check({key}); }
  bool set_if_absent(const std::string& key, const std::vector<char>& data) {
    void* reply = redisCommand(redis_, "SETNX %b %b", key.data(), key.size(), data.data(), data.size());
    MT_CHECK(reply != nullptr, "SETNX failed");
    const bool set = static_cast<redisReply*>(reply)->type == REDIS_REPLY_INTEGER &&
                     static_cast<redisReply*>(reply)->integer == 1;
    freeReplyObject(reply);
    return set;
  }
  void erase(const std::string& key) {
    void* reply = redisCommand(redis_, "DEL %b", key.data(), key.size());
    if (reply) freeReplyObject(reply);  // best effort: the key is ours and read by every rank
  }
};
#endif

class FileOrRedisStore : public KeyValueStore {
 public:
  // owned_dir: a directory this store made and removes when it goes.
  // prefix: before every key (the job's id, so jobs with different ids never meet each other's keys).
  FileOrRedisStore(std::unique_ptr<FileStore> file, std::string spec, std::string prefix, std::string owned_dir = "")
      : file_(std::move(file)), spec_(std::move(spec)), prefix_(std::move(prefix)), owned_dir_(std::move(owned_dir)) {}
#if MT_REDIS_STORE
  FileOrRedisStore(std::unique_ptr<RedisStore> redis, std::string spec, std::string prefix)
      : redis_(std::move(redis)), spec_(std::move(spec)), prefix_(std::move(prefix)) {}
#endif
  ~FileOrRedisStore() override {
    if (owned_dir_.empty()) return;
    forget_own_keys();
    rmdir(owned_dir_.c_str());  // best effort: a destructor must not throw
  }

  std::string describe() const override { return spec_; }

  void set(const std::string& key, const std::vector<char>& data, const Deadline&) override {
    try {
      inner().set(prefix_ + key, data);
      set_keys_.push_back(prefix_ + key);
    } catch (const std::exception& e) {
      MT_ERROR("distributed rendezvous: cannot publish key ", key, " in store ", spec_, ": ", e.what(),
               ". This store never overwrites a key: one left there by an earlier job that did not end cleanly ",
               "blocks this one. ", file_ ? "Empty that directory" : "Delete the job's keys (or FLUSHDB)",
               ", or set MIXTRAIN_STORE to a fresh one");
    }
  }

  bool set_if_absent(const std::string& key, const std::vector<char>& data, const Deadline&) override {
    try {
#if MT_REDIS_STORE
      if (redis_) return redis_->set_if_absent(prefix_ + key, data);
#endif
      return file_->set_if_absent(prefix_ + key, data);
    } catch (const std::exception& e) {
      MT_ERROR("distributed rendezvous: cannot publish key ", key, " in store ", spec_, ": ", e.what());
    }
  }

  std::vector<bool> present(const std::vector<std::string>& keys, const Deadline&) override {
    std::vector<bool> out;
    try {
      for (const auto& k : keys) out.push_back(has(prefix_ + k));
    } catch (const std::exception& e) {
      MT_ERROR("distributed rendezvous: cannot read store ", spec_, ": ", e.what());
    }
    return out;
  }

  std::vector<char> get_now(const std::string& key, const Deadline&) override {
    try {
      return inner().get(prefix_ + key);
    } catch (const std::exception& e) {
      MT_ERROR("distributed rendezvous: cannot read key ", key, " from store ", spec_, ": ", e.what());
    }
  }

  void forget_own_keys() override {
    if (file_) {
      const std::vector<std::string> paths = file_->getAllKeyFilePaths();
      for (size_t i = forgotten_files_; i < paths.size(); ++i) unlink(paths[i].c_str());
      forgotten_files_ = paths.size();
    }
#if MT_REDIS_STORE
    if (redis_)
      for (const auto& k : set_keys_) redis_->erase(k);
#endif
    set_keys_.clear();
  }

 private:
  gloo::rendezvous::Store& inner() {
#if MT_REDIS_STORE
    if (redis_) return *redis_;
#endif
    return *file_;
  }
  bool has(const std::string& key) {
#if MT_REDIS_STORE
    if (redis_) return redis_->has(key);
#endif
    return file_->has(key);
  }

  std::unique_ptr<FileStore> file_;
#if MT_REDIS_STORE
  std::unique_ptr<RedisStore> redis_;
#endif
  std::string spec_, prefix_;
  std::string owned_dir_;
  std::vector<std::string> set_keys_;
  size_t forgotten_files_ = 0;  // getAllKeyFilePaths() only grows
};

}  // namespace

std::shared_ptr<KeyValueStore> make_file_or_redis_store(const std::string& spec, const std::string& prefix) {
  if (spec.rfind("file:", 0) == 0) {
    const std::string dir = spec.substr(5);
    MT_CHECK(!dir.empty(), "distributed: store \"", spec, "\" names no directory");
    // Gloo's FileStore needs the directory to exist; every rank may race to create it.
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      MT_ERROR("distributed: cannot create the store directory ", dir, ": ", std::strerror(errno));
    return std::make_shared<FileOrRedisStore>(std::make_unique<FileStore>(dir), spec, prefix);
  }
  if (spec.rfind("redis:", 0) == 0) {
    std::string rest = spec.substr(6);
    if (rest.rfind("//", 0) == 0) rest = rest.substr(2);
    const auto colon = rest.rfind(':');
    const std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
    char* end = nullptr;
    const long port = colon == std::string::npos ? 6379 : std::strtol(rest.c_str() + colon + 1, &end, 10);
    MT_CHECK(!host.empty() && port > 0 && port < 65536 && (colon == std::string::npos || (end && *end == '\0')),
             "distributed: store \"", spec, "\" is not redis://host:port");
#if MT_REDIS_STORE
    try {
      return std::make_shared<FileOrRedisStore>(std::make_unique<RedisStore>(host, static_cast<int>(port)), spec,
                                                prefix);
    } catch (const std::exception& e) {
      MT_ERROR("distributed: cannot reach the Redis store at ", host, ":", port, ": ", e.what());
    }
#else
    MT_ERROR("distributed: store \"", spec, "\": this libgloo (or this build, without hiredis) has no Redis store");
#endif
  }
  MT_ERROR("distributed: store \"", spec, "\" is none of tcp://host:port, file:/dir and redis://host:port");
}

std::shared_ptr<KeyValueStore> make_private_store() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/mixtrain-store-XXXXXX";
  MT_CHECK(mkdtemp(tmpl.data()) != nullptr, "distributed: cannot create a store directory ", tmpl, ": ",
           std::strerror(errno));
  return std::make_shared<FileOrRedisStore>(std::make_unique<FileStore>(tmpl), "file:" + tmpl, "", tmpl);
}

#else  // no Gloo in this build

std::shared_ptr<KeyValueStore> make_file_or_redis_store(const std::string&, const std::string&) {
  MT_ERROR("distributed: ", unavailable_reason());
}

std::shared_ptr<KeyValueStore> make_private_store() { MT_ERROR("distributed: ", unavailable_reason()); }

#endif

}  // namespace mixtrain::distributed
