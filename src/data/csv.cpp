// The numeric CSV reader (header row, one row of numbers per line, one target column).
#include "mixtrain/data/readers.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/core/file_reader.h"

namespace mixtrain::data {

namespace {

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(ws);
  std::string t = s.substr(b, e - b + 1);
  if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
  return t;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream is(line);
  while (std::getline(is, field, ',')) out.push_back(trim(field));
  if (!line.empty() && line.back() == ',') out.push_back("");  // getline drops a trailing empty field
  return out;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

}  // namespace

CsvTable read_csv(const std::string& path, const std::string& target_column) {
  LineReader in(path, "read_csv");
  std::string line;
  while (in.next(line))
    if (!blank(line)) break;
  MT_CHECK(!blank(line), "read_csv: ", path, " is empty (expected a header row of column names)");
  const std::vector<std::string> header = split(line);
  int64_t target = -1;
  std::string columns;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == target_column) target = static_cast<int64_t>(i);
    columns += (i ? ", " : "") + header[i];
  }
  MT_CHECK(target >= 0, "read_csv: ", path, " has no column \"", target_column, "\" (columns: ", columns, ")");
  MT_CHECK(header.size() >= 2, "read_csv: ", path, " has no feature column besides the target \"", target_column, "\"");

  CsvTable table;
  const int64_t features = static_cast<int64_t>(header.size()) - 1;
  for (size_t i = 0; i < header.size(); ++i)
    if (static_cast<int64_t>(i) != target) table.feature_names.push_back(header[i]);
  std::vector<float> x, y;
  int64_t rows = 0;
  while (in.next(line)) {
    const int64_t line_no = in.line_number();
    if (blank(line)) continue;
    const std::vector<std::string> fields = split(line);
    MT_CHECK(fields.size() == header.size(), "read_csv: ", path, ":", line_no, ": expected ", header.size(),
             " fields, found ", fields.size());
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::string& f = fields[i];
      MT_CHECK(!f.empty(), "read_csv: ", path, ":", line_no, ": empty field in column \"", header[i], "\"");
      char* end = nullptr;
      const double v = std::strtod(f.c_str(), &end);
      MT_CHECK(end == f.c_str() + f.size(), "read_csv: ", path, ":", line_no, ": field \"", f, "\" in column \"",
               header[i], "\" is not a number");
      // Overflow to inf (in fp64 or when narrowed to the fp32 we train in) is an error; underflow
      // to a subnormal or zero is harmless.
      MT_CHECK(std::isfinite(static_cast<float>(v)), "read_csv: ", path, ":", line_no, ": field \"", f,
               "\" in column \"", header[i], "\" is not a finite float");
      if (static_cast<int64_t>(i) == target) {
        y.push_back(static_cast<float>(v));
      } else {
        x.push_back(static_cast<float>(v));
      }
    }
    ++rows;
  }
  MT_CHECK(rows > 0, "read_csv: ", path, " has a header but no data rows");
  table.features = from_vector(x, {rows, features});
  table.target = from_vector(y, {rows});
  return table;
}

}  // namespace mixtrain::data
