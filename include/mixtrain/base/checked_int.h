#pragma once
// Checked int64 arithmetic for byte and element counts: a sum or product past 2^63 - 1 (or below
// -2^63) is a mixtrain::Error naming what was being counted, never a wrapped number. Every count
// of bytes or elements formed from untrusted or unbounded values goes through these (shape
// element counts use checked_numel in shape.h, which is built on the same rule).
#include <cstdint>

namespace mixtrain {

namespace detail {
[[noreturn]] void throw_int64_overflow(const char* what, const char* op, int64_t a, int64_t b);
[[noreturn]] void throw_int64_out_of_range(const char* what, uint64_t value);
}  // namespace detail

// a + b; throws mixtrain::Error "<what>: a + b passes the int64 range" on overflow.
inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t out;
  if (__builtin_add_overflow(a, b, &out)) detail::throw_int64_overflow(what, "+", a, b);
  return out;
}

// a - b; throws on overflow.
inline int64_t checked_sub(int64_t a, int64_t b, const char* what) {
  int64_t out;
  if (__builtin_sub_overflow(a, b, &out)) detail::throw_int64_overflow(what, "-", a, b);
  return out;
}

// a * b; throws on overflow.
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) detail::throw_int64_overflow(what, "*", a, b);
  return out;
}

// An unsigned count (a size_t byte count) as int64; throws when it is past 2^63 - 1.
inline int64_t checked_int64(uint64_t value, const char* what) {
  if (value > static_cast<uint64_t>(INT64_MAX)) detail::throw_int64_out_of_range(what, value);
  return static_cast<int64_t>(value);
}

}  // namespace mixtrain
