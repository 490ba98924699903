#pragma once
// mixtrain::data: datasets, samplers, the DataLoader and file readers (docs/DATA.md).
#include "mixtrain/data/dataloader.h"
#include "mixtrain/data/dataset.h"
#include "mixtrain/data/make_data_loader.h"
#include "mixtrain/data/readers.h"
#include "mixtrain/data/sampler.h"
