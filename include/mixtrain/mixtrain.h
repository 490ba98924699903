#pragma once
// The umbrella header: everything a mixtrain user needs.
#include "mixtrain/autograd/grad_mode.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/core/device.h"
#include "mixtrain/core/dtype.h"
#include "mixtrain/core/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/core/half.h"
#include "mixtrain/core/rng.h"
#include "mixtrain/core/tensor.h"
#include "mixtrain/memory/allocator.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/ops/functional.h"
