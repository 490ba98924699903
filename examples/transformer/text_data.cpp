#include "transformer/text_data.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

namespace mixtrain::examples {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Through mixtrain's bounded reader: a FIFO or a device given as --text is refused at once.
void append_file(const std::string& path, std::vector<uint8_t>& out) {
  const std::string text = read_file(path, "transformer: the text corpus", uint64_t{1} << 30);
  out.insert(out.end(), text.begin(), text.end());
}

}  // namespace

std::vector<uint8_t> load_text_corpus(const std::string& path) {
  const bool is_default = path == kFortunesDir;
  const std::string hint = is_default ? " (install the Debian package fortunes, or pass --text FILE)" : "";
  struct stat st {};
  MT_CHECK(::stat(path.c_str(), &st) == 0, "transformer: no text corpus at ", path, hint);
  std::vector<uint8_t> text;
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> names;
    if (DIR* dir = ::opendir(path.c_str())) {
      while (const dirent* e = ::readdir(dir)) names.emplace_back(e->d_name);
      ::closedir(dir);
    }
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      const std::string file = path + "/" + name;
      struct stat fs {};
      if (name[0] == '.' || ends_with(name, ".dat") || ends_with(name, ".u8")) continue;
      if (::stat(file.c_str(), &fs) != 0 || !S_ISREG(fs.st_mode)) continue;
      append_file(file, text);
    }
  } else {
    append_file(path, text);
  }
  MT_CHECK(text.size() >= 1024, "transformer: the text corpus at ", path, " holds ", text.size(),
           " bytes; at least 1024 are needed", hint);
  return text;
}

TextWindows::TextWindows(const std::vector<uint8_t>& text, size_t begin, size_t end, int64_t context)
    : text_(&text), begin_(begin), end_(end), context_(context) {
  MT_CHECK(context > 0 && end <= text.size() && begin < end && end - begin > static_cast<size_t>(context) + 1,
           "transformer: a text of ", end - begin, " bytes is too short for a context of ", context);
}

int64_t TextWindows::size() const { return static_cast<int64_t>(end_ - begin_) - context_; }

data::Example TextWindows::get(int64_t index) const {
  data::check_index("TextWindows", index, size());
  const size_t start = begin_ + static_cast<size_t>(index);
  std::vector<int64_t> xs(static_cast<size_t>(context_)), ys(static_cast<size_t>(context_));
  for (size_t t = 0; t < xs.size(); ++t) {
    xs[t] = (*text_)[start + t];
    ys[t] = (*text_)[start + t + 1];
  }
  return {from_vector(xs, {context_}), from_vector(ys, {context_})};
}

}  // namespace mixtrain::examples
