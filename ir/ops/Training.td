// The tec dialect's gradients, losses and the training step's scalars (included by ir/TecOps.td, after its type constraints).
#ifndef TEC_OPS_TRAINING
#define TEC_OPS_TRAINING

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

class Tec_ActivationGradOp<string mnemonic, string forward, string formula>
    : Tec_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = "gradient of " # forward;
  let description = !strconcat([{
    The vector-Jacobian product of `}], forward, [{`: `dx = }], formula, [{`, with `x` the
    forward op's input. One kernel, as cuBLASLt's DGELU/DRELU epilogues and Transformer Engine's
    activation-backward kernels compute it.

    Example:
    ```mlir
    %dx = tec.}], mnemonic, [{ %dy, %x : tensor<64x128xf32>
    ```
  }]);
  let arguments = (ins Tec_FloatTensor:$grad, Tec_FloatTensor:$input);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $input attr-dict `:` type($result)";
}

def Tec_ReluGradOp : Tec_ActivationGradOp<"relu_grad", "tec.relu", "x > 0 ? dy : 0">;

def Tec_GeluGradOp : Tec_ActivationGradOp<"gelu_grad", "tec.gelu", "dy * gelu'(x)"> {
  let arguments = (ins Tec_FloatTensor:$grad, Tec_FloatTensor:$input,
                   DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let hasVerifier = 1;
}

def Tec_OneHotOp : Tec_Op<"one_hot", [Pure]> {
  let summary = "class indices to one-hot rows";
  let description = [{
    `result[..., c] = (labels[...] == c) ? 1 : 0` for `c < depth`, the last result dim. An index outside
    [0, depth) is a run-time error. Integer labels carry no gradient.

    Example:
    ```mlir
    %0 = tec.one_hot %labels : tensor<64xi64> -> tensor<64x10xf32>
    ```
  }];
  let arguments = (ins Tec_IndexTensor:$labels);
  let results = (outs Tec_FloatTensor:$result);
  let assemblyFormat = "$labels attr-dict `:` type($labels) `->` type($result)";
  let hasVerifier = 1;
}

def Tec_ClipCoefficientOp : Tec_Op<"clip_coefficient", [Pure, AllTypesMatch<["norm", "result"]>]> {
  let summary = "the factor that clips gradients to a global norm";
  let description = [{
    `min(1, max_norm / (norm + 1e-6))`, as `torch.nn.utils.clip_grad_norm_` computes it: every gradient is
    multiplied by it before the optimizer step.

    Example:
    ```mlir
    %c = tec.clip_coefficient %norm {max_norm = 1.0 : f32} : tensor<f32>
    ```
  }];
  let arguments = (ins Tec_Scalar:$norm, F32Attr:$max_norm);
  let results = (outs Tec_Scalar:$result);
  let assemblyFormat = "$norm attr-dict `:` type($norm)";
}

def Tec_AllFiniteOp : Tec_Op<"all_finite", [Pure]> {
  let summary = "whether every element of every input is finite";
  let description = [{
    `true` when no input holds an inf or a NaN: dynamic loss scaling skips a step whose gradients overflowed.

    Example:
    ```mlir
    %ok = tec.all_finite %g0, %g1 : tensor<64x32xf32>, tensor<32xf32> -> tensor<i1>
    ```
  }];
  let arguments = (ins Variadic<Tec_FloatTensor>:$inputs);
  let results = (outs 0DTensorOf<[I1]>:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
}

def Tec_WorldSizeOp : Tec_Op<"world_size", [Pure]> {
  let summary = "how many ranks train together (data parallelism), as a float";
  let description = [{
    1 in a single process; under mpirun or srun the number of ranks. @train_step seeds its backward with
    `1 / world_size`, so that each rank's gradient is its share of the global batch's mean gradient and
    summing them over the ranks (`tec.all_reduce` sum) gives the global batch's: every tensor of a rank's
    backward is then the one a single process with the global batch computes for those samples, which FP8's
    quantization of gradients (not scale-invariant below E4M3's normal range) needs.

    Example:
    ```mlir
    %n = tec.world_size : tensor<f32>
    ```
  }];
  let results = (outs Tec_Scalar:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Tec_AllReduceOp : Tec_Op<"all_reduce"> {
  let summary = "a collective over the ranks of data parallelism: each tensor reduced across them";
  let description = [{
    Every rank passes tensors of the same types in the same order and receives, for each, the elementwise
    `sum`, `max` or `mean` over the ranks (DESIGN.md, Data parallelism). @train_step averages its gradients
    and its loss with it, one op per bucket of gradients in the order the backward produces them, so that a
    bucket can travel while the rest of the backward runs; on one process it is the identity. Not Pure:
    a collective must run on every rank exactly as written, never merged with another or dropped.

    Example:
    ```mlir
    %g0r, %g1r = tec.all_reduce %g0, %g1 {reduction = "mean"}
        : tensor<64x32xf32>, tensor<32xf32> -> tensor<64x32xf32>, tensor<32xf32>
    ```
  }];
  let arguments = (ins Variadic<StaticShapeTensorOf<[F32]>>:$inputs, StrAttr:$reduction);
  let results = (outs Variadic<StaticShapeTensorOf<[F32]>>:$results);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($results)";
  let hasVerifier = 1;
}

class Tec_ShardingOp<string mnemonic, list<Trait> traits = []> : Tec_Op<mnemonic, traits> {
  code shardingDescription = [{
    Optimizer sharding (ZeRO stage 1) splits each tensor over `ranks` ranks as one flat vector: its elements
    in row-major order, zero-padded to `ranks * k` with `k = ceil(elements / ranks)`; rank r holds the
    elements `[r k, (r + 1) k)`, a 1-D tensor of `k`. `ranks` is fixed when the plan is compiled (the shapes
    are static); a plan runs only where the launcher started that many ranks.
  }];
}

def Tec_ReduceScatterOp : Tec_ShardingOp<"reduce_scatter"> {
  let summary = "the sum over the ranks of each tensor, of which each rank keeps its own shard";
  let description = shardingDescription # [{
    Result i is this rank's shard of the elementwise sum of input i over the ranks: @train_step with
    `shard-optimizer` reduces its gradients with it in buckets, as it would with `tec.all_reduce`, each rank
    then updating only its shard of each parameter. On one rank it flattens. Not Pure: a collective.

    Example:
    ```mlir
    %g0s, %g1s = tec.reduce_scatter %g0, %g1 {ranks = 2 : i64}
        : tensor<3x5xf32>, tensor<4xf32> -> tensor<8xf32>, tensor<2xf32>
    ```
  }];
  let arguments = (ins Variadic<StaticShapeTensorOf<[F32]>>:$inputs, I64Attr:$ranks);
  let results = (outs Variadic<1DTensorOf<[F32]>>:$results);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($results)";
  let hasVerifier = 1;
}

def Tec_AllGatherOp : Tec_ShardingOp<"all_gather"> {
  let summary = "each rank's shard of every tensor, gathered into the whole tensor on every rank";
  let description = shardingDescription # [{
    Result i is the concatenation of the ranks' input i in rank order, less the padding, in result i's
    shape: @train_step with `shard-optimizer` gathers the parameters each rank updated on its shard. Not
    Pure: a collective.

    Example:
    ```mlir
    %p0, %p1 = tec.all_gather %p0s, %p1s {ranks = 2 : i64}
        : tensor<8xf32>, tensor<2xf32> -> tensor<3x5xf32>, tensor<4xf32>
    ```
  }];
  let arguments = (ins Variadic<1DTensorOf<[F32]>>:$inputs, I64Attr:$ranks);
  let results = (outs Variadic<StaticShapeTensorOf<[F32]>>:$results);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($results)";
  let hasVerifier = 1;
}

def Tec_ShardOp : Tec_ShardingOp<"shard", [Pure]> {
  let summary = "this rank's shard of a tensor every rank holds whole (no communication)";
  let description = shardingDescription # [{
    @train_step with `shard-optimizer` takes each parameter's shard with it, to update alongside the
    gradient's shard from `tec.reduce_scatter`.

    Example:
    ```mlir
    %ps = tec.shard %p {ranks = 2 : i64} : tensor<3x5xf32> -> tensor<8xf32>
    ```
  }];
  let arguments = (ins StaticShapeTensorOf<[F32]>:$input, I64Attr:$ranks);
  let results = (outs 1DTensorOf<[F32]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Tec_LossScaleUpdateOp : Tec_Op<"loss_scale_update", [Pure]> {
  let summary = "dynamic loss scaling, as torch.cuda.amp.GradScaler";
  let description = [{
    When the step's gradients were finite: count one more clean step, and after `growth_interval` clean
    steps multiply the scale by `growth_factor` (and restart the count). Otherwise multiply it by
    `backoff_factor` and restart the count; the step itself is skipped by its caller.

    Example:
    ```mlir
    %s, %n = tec.loss_scale_update %scale, %clean, %ok {growth_interval = 2000 : i64}
        : tensor<f32>, tensor<f32>, tensor<i1> -> tensor<f32>, tensor<f32>
    ```
  }];
  let arguments = (ins Tec_Scalar:$scale, Tec_Scalar:$clean_steps, 0DTensorOf<[I1]>:$finite,
                   I64Attr:$growth_interval, DefaultValuedAttr<F32Attr, "2.0f">:$growth_factor,
                   DefaultValuedAttr<F32Attr, "0.5f">:$backoff_factor);
  let results = (outs Tec_Scalar:$new_scale, Tec_Scalar:$new_clean_steps);
  let assemblyFormat = [{
    $scale `,` $clean_steps `,` $finite attr-dict `:` type($scale) `,` type($clean_steps) `,` type($finite)
    `->` type($new_scale) `,` type($new_clean_steps)
  }];
}

def Tec_OptimizerUpdateOp : Tec_Op<"optimizer_update", [Pure, AttrSizedOperandSegments]> {
  let summary = "one parameter's optimizer step, fused into one pass over its elements";
  let description = [{
    The whole update of one parameter as one op (one kernel, not a dozen elementwise ones): the gradient
    times the clipping coefficient `clip` (when given), then
    - `sgd`: `g += weight_decay * p` (L2, as torch.optim.SGD); with `momentum`, one moment
      `v' = momentum * v + g` and the direction `v'` (or `g + momentum * v'` with `nesterov`);
      `p' = p - lr * direction`.
    - `adamw`: moments `m' = beta1 m + (1 - beta1) g`, `v' = beta2 v + (1 - beta2) g^2`, bias-corrected at
      `t = step + 1`, `p' = p - lr * (m'/(1 - beta1^t) / (sqrt(v'/(1 - beta2^t)) + eps) + weight_decay * p)`
      (decoupled weight decay, as torch.optim.AdamW).
    With `finite` false the step leaves everything as it was: gradients that overflowed (dynamic loss
    scaling), or a step of gradient accumulation that only adds to the sums.
    Backends may run every parameter's update of a step in one launch.

    Example:
    ```mlir
    %p2, %m2, %v2 = tec.optimizer_update %p, %g : tensor<4x8xf32>, tensor<4x8xf32>
        moments(%m, %v : tensor<4x8xf32>, tensor<4x8xf32>) lr(%lr : tensor<f32>) step(%t : tensor<f32>)
        {optimizer = "adamw", beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32,
         weight_decay = 0.01 : f32} -> tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
    ```
  }];
  let arguments = (ins StaticShapeTensorOf<[F32]>:$param, StaticShapeTensorOf<[F32]>:$grad,
                   Variadic<StaticShapeTensorOf<[F32]>>:$moments, Tec_Scalar:$lr, Tec_Scalar:$step,
                   Optional<Tec_Scalar>:$clip, Optional<0DTensorOf<[I1]>>:$finite, StrAttr:$optimizer,
                   DefaultValuedAttr<F32Attr, "0.9f">:$beta1, DefaultValuedAttr<F32Attr, "0.999f">:$beta2,
                   DefaultValuedAttr<F32Attr, "1e-8f">:$eps, DefaultValuedAttr<F32Attr, "0.0f">:$weight_decay,
                   DefaultValuedAttr<F32Attr, "0.0f">:$momentum, DefaultValuedAttr<BoolAttr, "false">:$nesterov);
  let results = (outs StaticShapeTensorOf<[F32]>:$new_param, Variadic<StaticShapeTensorOf<[F32]>>:$new_moments);
  let assemblyFormat = [{
    $param `,` $grad `:` type($param) `,` type($grad) (`moments` `(` $moments^ `:` type($moments) `)`)?
    `lr` `(` $lr `:` type($lr) `)` `step` `(` $step `:` type($step) `)`
    (`clip` `(` $clip^ `:` type($clip) `)`)? (`finite` `(` $finite^ `:` type($finite) `)`)?
    attr-dict `->` type(results)
  }];
  let hasVerifier = 1;
}

def Tec_LrScheduleOp : Tec_Op<"lr_schedule", [Pure, AllTypesMatch<["step", "lr", "result"]>]> {
  let summary = "the learning rate at a training step";
  let description = [{
    `constant`: `lr`. `warmup`: `lr * min(1, (step + 1) / warmup_steps)`. `cosine`: the same warm-up,
    then `lr * 0.5 * (1 + cos(pi * (step - warmup_steps) / (total_steps - warmup_steps)))`, reaching 0 at
    `total_steps`. `step` counts from 0. `lr` is an operand, not an attribute: the train step's "lr" state,
    which a trainer may set between steps (PyTorch-style schedulers drive it there).

    Example:
    ```mlir
    %rate = tec.lr_schedule %step, %lr {schedule = "cosine", warmup_steps = 10 : i64, total_steps = 100 : i64} : tensor<f32>
    ```
  }];
  let arguments = (ins Tec_Scalar:$step, Tec_Scalar:$lr, StrAttr:$schedule, I64Attr:$warmup_steps,
                   I64Attr:$total_steps);
  let results = (outs Tec_Scalar:$result);
  let assemblyFormat = "$step `,` $lr attr-dict `:` type($step)";
  let hasVerifier = 1;
}

#endif // TEC_OPS_TRAINING
