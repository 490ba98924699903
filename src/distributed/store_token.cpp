// The job's store token and where the store listens (store_server.h): the secret a launcher makes
// for its ranks (in the environment, or a file of mode 0600 for `--join`, never on a command
// line), and the bind address that keeps a one-host job's store on loopback.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "distributed/env.h"
#include "mixtrain/base/error.h"
#include "mixtrain/distributed/store_server.h"

namespace mixtrain::distributed {

namespace {

bool is_loopback(const std::string& a) {
  return a == "localhost" || a == "::1" || a == "[::1]" || a.rfind("127.", 0) == 0;
}

// Whether `a` is a numeric address of one of this host's interfaces.
bool is_local_address(const std::string& a) {
  in_addr v4{};
  in6_addr v6{};
  const bool four = inet_pton(AF_INET, a.c_str(), &v4) == 1, six = !four && inet_pton(AF_INET6, a.c_str(), &v6) == 1;
  if (!four && !six) return false;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    if (four && i->ifa_addr->sa_family == AF_INET)
      found = std::memcmp(&reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, &v4, sizeof(v4)) == 0;
    if (six && i->ifa_addr->sa_family == AF_INET6)
      found = std::memcmp(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, &v6, sizeof(v6)) == 0;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

std::string store_bind_address(const std::string& master_addr, bool one_host) {
  if (const char* b = env_value("MIXTRAIN_STORE_BIND")) return std::string(b) == "*" ? "" : b;
  if (one_host && (master_addr.empty() || is_loopback(master_addr)))
    return master_addr == "::1" || master_addr == "[::1]" ? "::1" : "127.0.0.1";
  if (is_local_address(master_addr)) return master_addr;
  return "";
}

std::string store_token() {
  if (const char* t = env_value("MIXTRAIN_STORE_TOKEN")) return t;
  const char* file = env_value("MIXTRAIN_STORE_TOKEN_FILE");
  if (!file) return "";
  std::ifstream in(file);
  std::string line;
  MT_CHECK(in && std::getline(in, line) && !line.empty(), "distributed: MIXTRAIN_STORE_TOKEN_FILE=", file,
           in ? " holds no token on its first line" : " cannot be read");
  return line;
}

std::string make_job_store_token(const std::string& dir) {
  if (env_value("MIXTRAIN_STORE_TOKEN") || env_value("MIXTRAIN_STORE_TOKEN_FILE")) return "";
  std::random_device rd;
  static const char hex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 32; ++i) token += hex[rd() % 16];
  const std::string path = dir + "/store-token";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  MT_CHECK(fd >= 0, "distributed: cannot create the store's token file ", path, ": ", std::strerror(errno));
  const std::string text = token + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  MT_CHECK(written, "distributed: cannot write the store's token file ", path);
  MT_CHECK(::setenv("MIXTRAIN_STORE_TOKEN", token.c_str(), 1) == 0, "distributed: setenv failed");
  return path;
}

}  // namespace mixtrain::distributed
