#pragma once
// The TCP store's frames, shared by its server (store_server.cpp) and client (tcp_store.cpp).
// Both ways: u8 op-or-status, u32 count, then count x (u32 length, bytes), lengths in network
// order. A connection starts with HELLO {magic, token}: the magic checks that the server is ours
// (a torchrun agent's store on the same port is not), the token that the client is the job's; the
// answer gives the server's generation, a random id per server, so keys can never be those of an
// earlier job's server.
#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace mixtrain::distributed::wire {

enum Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kCheck = 4, kSetIfAbsent = 5 };
// kDenied: HELLO without the job's token; kFull: a set beyond the quota (one item: why).
enum Status : uint8_t { kOk = 0, kMissing = 1, kBad = 2, kDenied = 3, kFull = 4 };
constexpr char kMagic[] = "mixtrain-store-1";
constexpr uint32_t kMaxItems = 1u << 16;
constexpr uint32_t kMaxItemBytes = 64u << 20;

inline void put_u32(std::string& out, uint32_t v) {
  const uint32_t n = htonl(v);
  out.append(reinterpret_cast<const char*>(&n), 4);
}

inline uint32_t get_u32(const char* p) {
  uint32_t n;
  std::memcpy(&n, p, 4);
  return ntohl(n);
}

inline std::string frame(uint8_t code, const std::vector<std::string>& items) {
  std::string out(1, static_cast<char>(code));
  put_u32(out, static_cast<uint32_t>(items.size()));
  for (const auto& it : items) {
    put_u32(out, static_cast<uint32_t>(it.size()));
    out += it;
  }
  return out;
}

// A complete frame at the front of `buf`: its size, 0 while incomplete, -1 when malformed.
inline int64_t parse_frame(const std::string& buf, uint8_t& code, std::vector<std::string>& items) {
  if (buf.size() < 5) return 0;
  code = static_cast<uint8_t>(buf[0]);
  const uint32_t n = get_u32(buf.data() + 1);
  if (n > kMaxItems) return -1;
  size_t at = 5;
  items.clear();
  for (uint32_t i = 0; i < n; ++i) {
    if (buf.size() < at + 4) return 0;
    const uint32_t len = get_u32(buf.data() + at);
    if (len > kMaxItemBytes) return -1;
    at += 4;
    if (buf.size() < at + len) return 0;
    items.emplace_back(buf.data() + at, len);
    at += len;
  }
  return static_cast<int64_t>(at);
}

}  // namespace mixtrain::distributed::wire
