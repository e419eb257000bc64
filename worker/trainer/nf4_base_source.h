// QLoRA's frozen base: a ShardSource (sharded_engine.h) that hands out NF4-quantized base
// weights.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine.h"
#include "sharded_engine.h"

namespace llamafleet::trainer {

// A frozen source over `whole`, a frozen source of whole (untiled) tensors: each frozen
// tensor that `quantized(name)` selects is read whole, NF4-quantized (nf4.h: blocks of 64
// along the tensor's own flattened elements, double-quantized absmaxes) and dequantized,
// and the requested elements of that are returned; other tensors pass through unchanged.
// The values never depend on how the flat is sharded or on the world size, so a resumed or
// resized run reads the same base. A non-finite weight fails with INVALID_ARGUMENT naming
// the tensor. The engine's frozen flat holds these dequantized values in the compute dtype.
ShardSource Nf4BaseSource(ShardSource whole, const std::vector<UnitLayout>& layout,
                          std::function<bool(const std::string& name)> quantized);

}  // namespace llamafleet::trainer
