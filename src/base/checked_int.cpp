#include "mixtrain/base/checked_int.h"

#include "mixtrain/base/error.h"

namespace mixtrain::detail {

void throw_int64_overflow(const char* what, const char* op, int64_t a, int64_t b) {
  MT_ERROR(what, ": ", a, " ", op, " ", b, " is outside the int64 range (-2^63 to 2^63 - 1); refusing a wrapped count");
}

void throw_int64_out_of_range(const char* what, uint64_t value) {
  MT_ERROR(what, ": ", value, " is past 2^63 - 1, the largest count mixtrain keeps");
}

}  // namespace mixtrain::detail
