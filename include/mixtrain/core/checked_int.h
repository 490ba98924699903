#pragma once
// Moved to <mixtrain/base/checked_int.h> (docs/ARCHITECTURE.md, "Public API"); this path stays for code
// that includes it. Nothing in mixtrain includes it (scripts/check_layers.py).
#include "mixtrain/base/checked_int.h"
