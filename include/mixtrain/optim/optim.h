#pragma once
// Everything in mixtrain::optim: the optimizers and the learning-rate schedulers.
#include "mixtrain/optim/adam.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/lr_scheduler.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/optim/schedulers.h"
#include "mixtrain/optim/sgd.h"
