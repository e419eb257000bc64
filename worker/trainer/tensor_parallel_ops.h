// The collectives of a tensor-parallel decoder (Megatron's f, g and vocabulary-parallel
// embedding and loss) as autograd functions over a group's Comm (collectives.h). With no
// group (nullptr) or a group of one, each is the plain single-process operation.
//
// Every rank of the group must call them in the same order with tensors of the same
// shape: the model does, because all ranks of a group run the same micro-batch through the
// same layers. Collectives block (their Wait() runs inside forward or backward) and throw
// c10::Error when the group fails, which comes out of forward() or backward().
#pragma once

#include <ATen/ATen.h>

#include "collectives.h"

namespace llamafleet::trainer {

// f: identity in forward, the sum of the group's gradients in backward. The input of a
// column-parallel projection (each rank computes part of the output from all of `x`).
at::Tensor CopyToTensorParallel(const at::Tensor& x, Comm* tp);

// g: the sum of the group's `x` in forward, identity in backward. The output of a
// row-parallel projection (each rank holds a partial sum).
at::Tensor ReduceFromTensorParallel(const at::Tensor& x, Comm* tp);

// embedding(weight, tokens) where rank r holds rows [r*V/T, (r+1)*V/T) of the vocabulary
// (`weight_slice` [V/T, h]): each rank looks up the tokens it holds, zeros elsewhere, and
// the group sums. [B, T] tokens -> [B, T, h].
at::Tensor VocabParallelEmbedding(const at::Tensor& weight_slice, const at::Tensor& tokens, Comm* tp);

// Sum over rows of cross_entropy(logits, labels) where rank r holds columns [r*V/T,
// (r+1)*V/T) of the logits (`logits_slice` [N, V/T], fp32): the full [N, V] logits are
// never gathered; the group exchanges [N] maxima and [2, N] sums. The gradient of each
// slice is softmax - one_hot on that slice, as cross_entropy's.
at::Tensor VocabParallelCrossEntropySum(const at::Tensor& logits_slice, const at::Tensor& labels, Comm* tp);

}  // namespace llamafleet::trainer
