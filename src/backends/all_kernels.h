#pragma once
// Every op family's kernel declarations, for code that walks or calls kernels of several families
// (tests, benchmarks). Library code includes the one family header it uses.
#include "backends/amp.h"
#include "backends/attention.h"
#include "backends/conv.h"
#include "backends/copy.h"
#include "backends/elementwise.h"
#include "backends/embedding.h"
#include "backends/fp8.h"
#include "backends/loss.h"
#include "backends/matmul.h"
#include "backends/norm.h"
#include "backends/optim.h"
#include "backends/pool_upsample.h"
#include "backends/random.h"
#include "backends/reduce.h"
#include "backends/softmax.h"
