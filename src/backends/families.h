#pragma once
// The op families, one X-macro entry each: every backend's register.cpp walks this list, calling
// register_<family>() from its <family>.cpp, so a new family is one line here and one
// registration function per backend.
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
