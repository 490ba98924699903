#pragma once
// What the file-reading fuzz targets share: a directory of this process's own, removed when the
// fuzzer exits, and writing an input into it. The directory's name is kept on the heap, never
// freed, because the exit handler may run after static objects are destroyed.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace mixtrain::fuzz {

inline const std::string* g_work_dir = nullptr;

inline void remove_work_dir() {
  std::error_code ignored;
  std::filesystem::remove_all(*g_work_dir, ignored);
}

inline const std::filesystem::path& work_dir() {
  static const std::filesystem::path dir = [] {
    std::string t = (std::filesystem::temp_directory_path() / "mt_fuzz_XXXXXX").string();
    if (!::mkdtemp(t.data())) std::abort();
    g_work_dir = new std::string(t);
    std::atexit(remove_work_dir);
    return std::filesystem::path(t);
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

// `bytes` written to a file named `name` in the work directory; its path.
inline std::string input_file(const std::string& name, const std::string& bytes) {
  const std::filesystem::path p = work_dir() / name;
  write_file(p, bytes);
  return p.string();
}

}  // namespace mixtrain::fuzz
