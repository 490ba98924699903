#pragma once
// Everything in mixtrain::nn: modules, layers, containers, initialisers, functional ops.
#include "mixtrain/nn/activation.h"
#include "mixtrain/nn/container.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/init.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/nn/module.h"
