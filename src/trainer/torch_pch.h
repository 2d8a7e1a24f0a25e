// Precompiled header for every libtorch translation unit: torch.h alone costs
// ~12 s per file to parse, so it is parsed once per build.
#pragma once
#include <torch/torch.h>
