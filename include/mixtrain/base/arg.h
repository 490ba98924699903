#pragma once
// MT_ARG declares a chainable option: a setter that returns the options object, so calls chain
// (AdamOptions().lr(1e-3).weight_decay(0.01)), a getter, and the member with its default:
//   MT_ARG(double, lr) = 1e-3;
// This is the pattern of PyTorch's C++ frontend (TORCH_ARG).

#define MT_ARG(T, name)                                          \
 public:                                                         \
  inline auto name(const T& new_value)->decltype(*this) {        \
    this->name##_ = new_value;                                   \
    return *this;                                                \
  }                                                              \
  inline const T& name() const noexcept { return this->name##_; } \
                                                                 \
 private:                                                        \
  T name##_

// MT_ARG_FOR(Self, T, name): MT_ARG whose setter returns Self&, for options declared once in a
// base template that several option types derive from (Self the deriving type, CRTP): with
// MT_ARG there, AdamWOptions().lr(1e-3) would return the base and the chain would lose its type.
#define MT_ARG_FOR(Self, T, name)                                 \
 public:                                                          \
  inline Self& name(const T& new_value) {                         \
    this->name##_ = new_value;                                    \
    return static_cast<Self&>(*this);                             \
  }                                                               \
  inline const T& name() const noexcept { return this->name##_; } \
                                                                  \
 private:                                                         \
  T name##_
