#pragma once
// The op families, one X-macro entry each. Every backend defines register_<family>() in its
// <family>.cpp and the registry (registry.cpp) calls each backend's, for every family of this
// list; the meta backend makes every family's kernels no-ops on meta tensors. A new family is one
// line here, its header backends/<family>.h (which all_kernels.h includes, checked against this
// list) and one registration function per backend.
#define MT_KERNEL_FAMILIES(X) \
  X(copy)                     \
  X(random)                   \
  X(elementwise)              \
  X(reduce)                   \
  X(softmax)                  \
  X(loss)                     \
  X(matmul)                   \
  X(conv)                     \
  X(pool_upsample)            \
  X(norm)                     \
  X(embedding)                \
  X(amp)                      \
  X(optim)                    \
  X(attention)                \
  X(fp8)

// A backend's registration, expanded in its namespace: declares its register_<family>() of every
// family and defines register_kernels(), which calls them in the list's order.
#define MT_DECLARE_REGISTER_FAMILY(family) void register_##family();
#define MT_CALL_REGISTER_FAMILY(family) register_##family();
#define MT_BACKEND_REGISTRATION()                   \
  MT_KERNEL_FAMILIES(MT_DECLARE_REGISTER_FAMILY)    \
  void register_kernels() { MT_KERNEL_FAMILIES(MT_CALL_REGISTER_FAMILY) }
