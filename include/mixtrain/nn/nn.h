#pragma once
// Everything in mixtrain::nn: modules, layers, containers, initialisers, functional ops; not
// nn::checkpoint, which recomputes under the autocast state and so sits above nn (amp/recompute.h).
#include "mixtrain/nn/activation.h"
#include "mixtrain/nn/attention.h"
#include "mixtrain/nn/container.h"
#include "mixtrain/nn/conv.h"
#include "mixtrain/nn/embedding.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/init.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/nn/module.h"
#include "mixtrain/nn/normalization.h"
#include "mixtrain/nn/pooling.h"
#include "mixtrain/nn/skip_init.h"
