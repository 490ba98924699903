#pragma once
// Byte-level text for the language model: a corpus read whole, and the windows of it.
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

// Windows of context + 1 bytes of one part of a corpus, as a dataset: example i starts at byte
// begin + i; data is the first `context` bytes, target the last `context` (the next byte at every
// position), both int64 [context]. Random windows come from a RandomSampler with replacement.
class TextWindows : public data::Dataset {
 public:
  // The part [begin, end) of `text` (which must outlive this); it must hold a window.
  TextWindows(const std::vector<uint8_t>& text, size_t begin, size_t end, int64_t context);
  int64_t size() const override;
  data::Example get(int64_t index) const override;

 private:
  const std::vector<uint8_t>* text_;
  size_t begin_, end_;
  int64_t context_;
};

}  // namespace mixtrain::examples
