#pragma once
// A numeric CSV reader for tabular regression: a header row of column names, then one row of
// numbers per line; one named column is the target, every other column a feature.
#include <string>

#include "common/dataset.h"

namespace mixtrain::examples {

// Throws mixtrain::Error naming the file and line for a row with the wrong number of fields, an
// empty or non-numeric or non-finite field; and for a missing file, an empty file, a target
// column that is not in the header (listing the columns), or a header with no feature column.
// Blank lines are skipped; fields may be surrounded by spaces or double quotes; CRLF is fine.
Dataset read_csv(const std::string& path, const std::string& target_column);

}  // namespace mixtrain::examples
