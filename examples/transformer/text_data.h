#pragma once
// Byte-level text for the language model: a corpus read whole, and random windows of it.
#include <cstdint>
#include <string>
#include <vector>

#include <mixtrain/mixtrain.h>

namespace mixtrain::examples {

// The Debian package fortunes' text files (the default corpus).
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// The bytes of `path`: a file, or every regular file directly in a directory (sorted by name,
// skipping strfile's .dat and .u8 index files). Throws mixtrain::Error naming the path when it is
// missing or holds no text, and for the default directory which package to install.
std::vector<uint8_t> load_text_corpus(const std::string& path = kFortunesDir);

// Windows of context + 1 bytes at random offsets of one part of a corpus: inputs are the first
// `context` bytes, targets the last `context` (the next byte at every position).
class TextWindows {
 public:
  // The part [begin, end) of `text` (which must outlive this); it must hold a window.
  TextWindows(const std::vector<uint8_t>& text, size_t begin, size_t end, int64_t context, uint64_t seed);
  // x, y: int64 [batch, context] on the CPU.
  void next(int64_t batch, Tensor& x, Tensor& y);

 private:
  const std::vector<uint8_t>* text_;
  size_t begin_, end_;
  int64_t context_;
  Generator gen_;
};

}  // namespace mixtrain::examples
