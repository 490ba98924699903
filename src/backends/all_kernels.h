#pragma once
// Every op family's kernel declarations, for code that walks or calls kernels of several families
// (tests, benchmarks). Library code includes the one family header it uses.
#include "backends/amp.h"
#include "backends/attention.h"
#include "backends/conv.h"
#include "backends/copy.h"
#include "backends/elementwise.h"
#include "backends/embedding.h"
#include "backends/families.h"
#include "backends/fp8.h"
#include "backends/loss.h"
#include "backends/matmul.h"
#include "backends/norm.h"
#include "backends/optim.h"
#include "backends/pool_upsample.h"
#include "backends/random.h"
#include "backends/reduce.h"
#include "backends/softmax.h"

// A family of families.h whose header is missing above fails here, naming the family.
#define MT_FAMILY_HEADER_INCLUDED(family) \
  static_assert(sizeof(&::mixtrain::backends::kernel_family_##family) > 0, "backends/" #family ".h");
MT_KERNEL_FAMILIES(MT_FAMILY_HEADER_INCLUDED)
#undef MT_FAMILY_HEADER_INCLUDED
