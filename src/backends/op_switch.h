#pragma once
// Turns a run-time op code into a compile-time constant: with_unary(op, body) calls
// body(std::integral_constant<UnaryOp, op>{}), so a kernel instantiated per op has no switch in
// its inner loop. Shared by the CPU loops and the CUDA launchers.
#include <type_traits>

#include "backends/kernel_types.h"

namespace mixtrain::backends {

template <class Body>
void with_unary(UnaryOp op, Body&& body) {
  switch (op) {
#define MT_CASE(code, ...) case UnaryOp::code: body(std::integral_constant<UnaryOp, UnaryOp::code>{}); return;
    MT_UNARY_OPS(MT_CASE)
#undef MT_CASE
  }
}

template <class Body>
void with_binary(BinaryOp op, Body&& body) {
  switch (op) {
#define MT_CASE(code, ...) case BinaryOp::code: body(std::integral_constant<BinaryOp, BinaryOp::code>{}); return;
    MT_BINARY_OPS(MT_CASE)
#undef MT_CASE
  }
}

template <class Body>
void with_compare(CompareOp op, Body&& body) {
  switch (op) {
#define MT_CASE(code, ...) case CompareOp::code: body(std::integral_constant<CompareOp, CompareOp::code>{}); return;
    MT_COMPARE_OPS(MT_CASE)
#undef MT_CASE
  }
}

}  // namespace mixtrain::backends
