#pragma once
// This host's name, for messages and records ("?" when the system will not say).
#include <unistd.h>

#include <string>

namespace mixtrain::distributed {

inline std::string this_host() {
  char name[256] = {0};
  return gethostname(name, sizeof(name) - 1) == 0 ? name : "?";
}

}  // namespace mixtrain::distributed
