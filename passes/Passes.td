#ifndef TEC_PASSES
#define TEC_PASSES

include "mlir/Pass/PassBase.td"

def TecSimplifyShapes : Pass<"tec-simplify-shapes", "mlir::func::FuncOp"> {
  let summary = "Collapse chains of shape-only ops left by ONNX exporters";
  let description = [{
    Exporters emit Reshape→Reshape (Flatten then Reshape, Unsqueeze then Reshape) and
    Transpose→Transpose (attention's head split and merge) chains. Each chain becomes one op, and a
    transpose whose composed permutation is the identity disappears, so the fusion passes that follow
    see GEMMs directly connected to their consumers and the plan moves no bytes for nothing.
    A chain is only collapsed through an inner op with a single use: otherwise the inner result
    is still materialized and nothing is saved.
  }];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecRecognizeAttention : Pass<"tec-recognize-attention", "mlir::func::FuncOp"> {
  let summary = "Turn Softmax(scale * Q K^T + mask) V, as exporters write it, into tec.attention";
  let description = [{
    Exporters write attention as MatMul, a scale, masks, Softmax and MatMul, which materializes the
    [Tq, Tk] scores of every head (and in training keeps them for the backward pass). tec.attention
    computes the same in blocks with an online softmax and saves only O(Tq) per head.

    Matched: a MatMul whose left operand is a Softmax over the last dim, read by nothing else, of
    Q·K^T under any chain of Mul/Div by constants (also on Q and K^T, as exporters of
    scaled_dot_product_attention write sqrt(scale) on each), Adds of float masks and a Where that
    hides keys with a fill at or below -1e4 (HF's `torch.where(causal, w, finfo.min)`,
    `masked_fill(-1e9)`; only a row with every key hidden then differs: NaN, as in PyTorch's SDPA). Q, K^T, V
    of rank 2 to 5 ([B*H, T, D] from nn.MultiheadAttention, [B, H, T, D] from HF) become [B, H, T, D];
    K^T's transpose folds into K's; HF's repeat_kv on K and V becomes grouped-query heads. A constant
    mask that is exactly the causal rule (key j for query i iff j <= i, boolean or 0 / <= -1e4)
    becomes `causal`, so no [Tq, Tk] mask is stored. The dynamo exporter's guard on the probabilities,
    Where(IsNaN(p), 0, p), moves onto the output, where it does the same. Left decomposed: a softmax or an intermediate
    read elsewhere (e.g. returned attention weights), more than one non-causal mask, and a mask
    computed from a trained parameter (a learned position bias needs its gradient).
  }];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecRecognizePatterns : Pass<"tec-recognize-patterns", "mlir::func::FuncOp"> {
  let summary = "Turn the decomposed GELU, LayerNorm, RMSNorm, SiLU and SwiGLU forms exporters emit into single ops, and share repeated K/V heads";
  let description = [{
    `torch.onnx.export` and older opsets write GELU as `x * 0.5 * (1 + erf(x / sqrt(2)))` (or with
    tanh: `x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`), LayerNorm as
    ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, RMSNorm (Llama) as
    `x * Reciprocal(Sqrt(ReduceMean(Pow(x, 2)) + eps)) * w`, SiLU as `x * Sigmoid(x)` and SwiGLU's
    gating as `silu(gate) * up`. Each becomes one `tec.gelu`, `tec.layer_norm`, `tec.rms_norm`,
    `tec.silu` or `tec.swiglu`, so that fusion can put the GELU in a GEMM epilogue and a normalization
    or a gated activation runs as one kernel that reads its inputs once. Matching tolerates operand
    order, association, `x / sqrt(2)` vs `x * (1/sqrt(2))`, `Pow(d, 2)` vs `d * d`, the forms of an
    inverse square root, and constants rounded to float. Intermediates used elsewhere block a match:
    they must stay materialized. The fused op's location lists every source node.

    Grouped-query attention's repeat_kv (Unsqueeze, Expand, Reshape of each K/V head for the query heads
    sharing it) feeding a matmul becomes a matmul of the query heads seen as [..., G, r*M, K] by the K/V
    head itself: no copy per query head, and one GEMM per group instead of one per head.
  }];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecNarrowActivations : Pass<"tec-narrow-activations", "mlir::func::FuncOp"> {
  let summary = "Keep activations, saved tensors and gradients in 16 bits on BF16/FP16 targets";
  let description = [{
    tec-lower-for-target runs GEMMs in 16 bits and casts their results back to f32, so every activation,
    every tensor the backward pass keeps and every gradient would still take 4 bytes per element. This
    pass moves the widening casts down through the ops whose kernels compute in f32 from 16-bit operands
    anyway (elementwise ops, activations and their gradients, data movement, softmax, LayerNorm and
    RMSNorm with f32 statistics, attention with an f32 logsumexp, reductions that write f32), so that
    tensors stay 16-bit until an op that must see f32: the optimizer, a GEMM bias, an output. It folds
    narrow(widen(x)) to x, moves a narrowing cast above a transpose or reshape read only by it, lets a
    bias-free GEMM write f32 directly (weight gradients reach the optimizer unrounded), and takes an
    input read only narrowed in 16 bits (the session rounds the caller's f32 as it writes it: what the
    first GEMM did anyway). Master weights and optimizer state stay f32, and so do the readers of training
    state (a loss scale). On FP16 targets (precision=f16) the ops that leave FP16's range on ordinary
    inputs stay f32, as under autocast: exp, reciprocal, softplus and squares (an MSE loss past
    |y - t| = 256); losses and gradients of FP16 runs are scaled dynamically (tec-build-train-step).
  }];
  let options = [Option<"precision", "precision", "std::string", "\"bf16\"", "bf16 or f16">];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecFuseQuantize : Pass<"tec-fuse-quantize", "mlir::func::FuncOp"> {
  let summary = "Quantize to FP8 in the pass that computes the tensor: LayerNorm + quantize, GELU + quantize";
  let description = [{
    FP8 GEMM inputs are produced by a kernel, read again for their amax and read again for the quantize,
    and kept in 16 bits meanwhile. Transformer Engine fuses these; so does this pass:
    - a tensor's transposed FP8 copy (a wgrad GEMM's TN operand) quantized with the scale of its FP8 copy
      becomes that copy transposed (the same bits, from 1 byte per element);
    - `gelu(x)` read only by its amax and its quantize becomes `tec.cast_fp8 {activation = gelu}`: one
      pass, the GELU's output never stored (the backward reads the pre-activation and the FP8 copy);
    - a LayerNorm whose output only its amax and its quantize read becomes `tec.layer_norm_fp8`
      (Transformer Engine's LayerNormLinear);
    - a gradient dY read only by its amax, its quantize and the bias gradient's sum becomes
      `tec.cast_fp8_dbias` (TE's cast + dbias: dY read once).
    The fused ops quantize the f32 value the kernel computed, so they round once where the unfused chain
    rounded to 16 bits first.
  }];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecRecastWeights : Pass<"tec-recast-weights", "mlir::func::FuncOp"> {
  let summary = "Give each reader of a weight's 16-bit copy its own cast, made just before it";
  let description = [{
    A training step reads each weight's 16-bit copy in the forward GEMM and again in the backward's
    data-gradient GEMM: one shared copy lives across the whole step, the size of a saved activation
    per weight. Casting again before each reader (the weight read at 4 bytes per element, written at
    2) keeps each copy alive only around its GEMM, as Transformer Engine's cast-on-use does. Runs last,
    after CSE would have merged the copies.
  }];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecChannelsLast : Pass<"tec-channels-last", "mlir::func::FuncOp"> {
  let summary = "Run the cpu target's convolutions channels-last (NHWC), with the transposes between them cancelled";
  let description = [{
    oneDNN's direct convolution kernels read and write NHWC (or its blocked forms); tec's NCHW tensors
    cost two reorders per conv around them, more than the conv itself in a MobileNet (ONNX Runtime
    lays out its CPU conv nets once, NCHWc, for the same reason). Each f32 `tec.conv` becomes
    transpose → `tec.conv {channels_last}` → transpose back, and the transpose back moves down through
    what reads the image alike in any layout: elementwise ops (a bias, a BatchNorm's scale, an
    activation, a squeeze-excitation gate, a residual add), reductions (global pooling), max and
    average pools (`tec.pool {channels_last}`) and concats,
    until it meets the next conv's transpose and both vanish. Another operand of an elementwise op
    must transpose for free (a constant folds, a [1, C, 1, 1] gate only moves unit dims: a reshape,
    another image already transposed alike cancels), or the transpose stops there: a network
    then pays at most a transpose at its input and one where it leaves the image (a flatten).
    A 1x1 conv with unit strides, no padding and one group is then a GEMM of each pixel by the
    [M, C] weight: it becomes `tec.linear` (the backend's packed constant weights, its split over
    threads and its fused relu, GELU and residual epilogues; measured 3-5% faster than oneDNN's
    1x1 kernel on MobileNetV3 and EfficientNet at 1 and 2 threads).
    Only this pass's own transposes move; the cpu target's inference runs it (training keeps NCHW).
  }];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecFuseLinear : Pass<"tec-fuse-linear", "mlir::func::FuncOp"> {
  let summary = "Fuse GEMM + bias + activation into tec.linear";
  let description = [{
    Gemm (alpha 1, A not transposed, C a per-column bias) and MatMul by a 2-D weight become
    `tec.linear`; a following Add of a per-column bias and a Relu or Gelu join it as its epilogue,
    mirroring cuBLASLt's BIAS, RELU_BIAS and GELU_BIAS so that codegen maps the chain to one launch.
    cuBLASLt's GELU epilogue computes the tanh form: an erf GELU keeps the exact `gelu` epilogue unless
    `fast-gelu` is set. Batched MatMuls (attention) are left alone, and so is an intermediate with a
    second use. A 2-D transpose of the weight folds into `transpose_b` (a tied output layer reads the
    embedding in place). The fused op's location lists every source node.
  }];
  let options = [Option<"fastGelu", "fast-gelu", "bool", "false",
                        "allow the tanh GELU epilogue for an erf GELU">,
                 Option<"fuseGelu", "fuse-gelu", "bool", "true",
                        "fuse GELU (training keeps it apart: its gradient needs the pre-activation)">];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecInsertFp8 : Pass<"tec-insert-fp8", "mlir::ModuleOp"> {
  let summary = "Run eligible GEMMs in FP8 under Transformer Engine's recipes: delayed, current, block, MXFP8";
  let description = [{
    Each eligible `tec.linear` becomes `tec.fp8_gemm` over E4M3 operands: both operands are quantized
    with their current per-tensor `scale`, the GEMM takes the matching `scale_inv`s, and the amax of
    every quantized tensor feeds `tec.delayed_scaling`, which produces the next history, scale and
    scale_inv (Transformer Engine's DelayedScaling: algo max|most_recent, margin). That FP8 meta state
    is explicit: per quantized tensor three function arguments tagged `tec.state` (history starting at
    0, scale and scale_inv at 1) and three results tagged `tec.state_update`, so the function stays pure
    and a step is `state' = f(state, inputs)`.

    That is the `delayed` recipe; `recipe` picks Transformer Engine 2.x's others, none with state:
    `current` (each tensor's scale from its own amax this step: `tec.amax`, `tec.current_scaling`,
    `tec.quantize`), `block` (Float8BlockScaling, DeepSeek-V3's: `tec.quantize_blocks` with 1x128 blocks
    along K for activations and gradients and 128x128 for parameters, power-of-two scales unless
    `block-scales=f32`, E4M3 by default, and `tec.fp8_block_gemm`) and `mxfp8` (1x32 blocks along K with
    E8M0 scales); `auto` is the target's own (`bestRecipe`: mxfp8 on sm_100, block on sm_90, current on sm_89,
    block in the cpu's emulation). A recipe per layer: `recipe = "block;lm_head|attn.*=delayed"`, the first regex that
    matches one of a GEMM's ONNX node names wins. Where `target` cannot run a recipe (`recipeBlocker`), the
    GEMM takes the next one (mxfp8, block, current) and its `tec.precision` tag says why. A tensor two GEMMs
    read is quantized once per layout and recipe; a block-scaled one is quantized again from the
    high-precision tensor for each layout (TE's columnwise copy), never from another FP8 copy.

    Eligibility is one function, `fp8Blocker`: K and N multiples of 16 (Hopper FP8 GEMMs are TN-only
    with 16-byte-aligned leading dims), then the policy: `fp8=none`, a `keep-precision` node-name regex
    (first and last layers, typically), and under `fp8=auto` a size threshold below which quantizing
    costs more than FP8 saves. A GEMM left in higher precision is tagged `tec.precision` with the reason,
    and the compile summary lists it.

    With `attention` (Transformer Engine's `fp8_dpa`, opt-in there too: the probabilities in E4M3 cost
    accuracy) each `tec.attention` becomes `tec.attention_fp8`: Q, K and V quantized like GEMM operands,
    two more scaled tensors (the softmax probabilities and the output, with the amaxes the kernel
    yields), and the output dequantized for its readers; its `tec.attention_grad` becomes
    `tec.attention_fp8_grad` on the forward's FP8 tensors (the backward keeps those, 1 byte per element)
    with the output gradient quantized (E5M2 under hybrid) and three more scaled tensors, dP and the
    gradients of Q, K and V, dequantized for their readers.
  }];
  let options = [
    Option<"mode", "fp8", "::tec::Fp8Mode", "::tec::Fp8Mode::Auto", "auto | all | none",
           [{::llvm::cl::values(clEnumValN(::tec::Fp8Mode::Auto, "auto", "where the cost model says FP8 pays"),
                                clEnumValN(::tec::Fp8Mode::All, "all", "every eligible GEMM"),
                                clEnumValN(::tec::Fp8Mode::None, "none", "no GEMM"))}]>,
    Option<"keepPrecision", "keep-precision", "std::string", "\"\"",
           "regex of ONNX node names whose GEMMs stay in higher precision">,
    Option<"amaxHistory", "amax-history", "int64_t", "1024", "length of each amax history">,
    Option<"margin", "margin", "int64_t", "0", "delayed scaling margin (scale /= 2^margin)">,
    Option<"algo", "algo", "::tec::AmaxAlgo", "::tec::AmaxAlgo::Max", "amax from the history: max | most_recent",
           [{::llvm::cl::values(clEnumValN(::tec::AmaxAlgo::Max, "max", "the history's largest"),
                                clEnumValN(::tec::AmaxAlgo::MostRecent, "most_recent", "the latest"))}]>,
    Option<"format", "format", "::tec::Fp8FormatPolicy", "::tec::Fp8FormatPolicy::Default",
           "default (the recipe's) | hybrid (E5M2 for the gradient operand of backward GEMMs) | e4m3 (everywhere)",
           [{::llvm::cl::values(clEnumValN(::tec::Fp8FormatPolicy::Default, "default", "the recipe's own"),
                                clEnumValN(::tec::Fp8FormatPolicy::Hybrid, "hybrid", "E5M2 gradients"),
                                clEnumValN(::tec::Fp8FormatPolicy::E4M3, "e4m3", "E4M3 everywhere"))}]>,
    Option<"recipe", "recipe", "std::string", "\"delayed\"",
           "RECIPE[;REGEX=RECIPE...]: auto | delayed | current | block | mxfp8, then per layer by ONNX node-name regex">,
    Option<"blockScales", "block-scales", "std::string", "\"pow2\"",
           "block recipe's scales: pow2 (Transformer Engine's default) | f32">,
    Option<"target", "target", "std::string", "\"cpu\"",
           "the target the recipes must run on: a recipe it lacks falls back (mxfp8, block, current)">,
    Option<"attention", "attention", "bool", "false",
           "attention in FP8 too (tec.attention_fp8 and its gradient)">
  ];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecLowerForTarget : Pass<"tec-lower-for-target", "mlir::ModuleOp"> {
  let summary = "Give each GEMM the precision the target's tensor cores have";
  let description = [{
    Driven by the capability table (`support/Targets.cpp`), not by scattered checks. On sm_90/sm_89 the
    FP8 GEMMs stay and every other GEMM runs in BF16. On sm_80/sm_86 an FP8 GEMM becomes a BF16 one
    (its quantize, amax and delayed-scaling ops, and their state, disappear; an FP8 attention becomes
    tec.attention again on what its quantizes read), as on sm_70/sm_75 in FP16:
    operands are cast down, the GEMM runs, the result is cast back, so the model's interface is the same
    for every target. On `cpu` GEMMs run in FP32, and FP8 GEMMs too unless `fp8-emulate` keeps them (to
    test FP8 numerics on a machine without a GPU). Every GEMM is tagged `tec.precision` with what it runs
    in and why.
  }];
  let options = [
    Option<"target", "target", "std::string", "\"cpu\"", "sm_90 | sm_89 | sm_86 | sm_80 | sm_75 | sm_70 | cpu">,
    Option<"fp8Emulate", "fp8-emulate", "bool", "false", "on cpu, keep FP8 GEMMs (emulated)">
  ];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecAutodiff : Pass<"tec-autodiff", "mlir::ModuleOp"> {
  let summary = "Build a function's vector-Jacobian product from each op's gradient definition";
  let description = [{
    Adds `@<function>_vjp`: the function's arguments followed by one cotangent per result, returning
    the results and the gradient of every selected argument (`wrt`: the `tec.param` arguments, the graph
    inputs, or all), each result tagged `tec.grad_of = <argument>`. The backward ops come from the
    Differentiable op interface (ir/TecInterfaces.td): every op defines its own vector-Jacobian product,
    so a new op brings its gradient with it. Only values that depend on a selected argument are
    differentiated (activity analysis), gradients of values used several times are summed, and an active
    op without a gradient is an error that names it. The training step (loss, optimizer) is built on top.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward\"", "the function to differentiate">,
    Option<"wrt", "wrt", "std::string", "\"params\"", "params | inputs | all">
  ];
  let dependentDialects = ["::tec::TecDialect"];
}

def TecBuildTrainStep : Pass<"tec-build-train-step", "mlir::ModuleOp"> {
  let summary = "Build @train_step: forward, loss, backward and the optimizer update";
  let description = [{
    Adds `@train_step(inputs, params, targets, optimizer state, step) -> (loss, next state...)`, a pure
    function: the forward pass, the loss against one target per output (`mse`, `l1`, or `cross-entropy`
    over int64 class labels, the mean over labels other than `ignore-index`, -100 as in torch), optionally clipped to a global norm as torch's clip_grad_norm_, its gradient with respect
    to every `tec.param` (from tec-autodiff's vector-Jacobian product, seeded with 1), and the optimizer
    update at the learning rate of `tec.lr_schedule`: `sgd` (momentum, nesterov, L2 weight decay as
    torch.optim.SGD) or `adamw` (bias-corrected moments, decoupled weight decay as torch.optim.AdamW),
    one fused `tec.optimizer_update` per param (clipping and the loss-scaling skip inside it: one pass
    over the param's elements instead of a dozen elementwise ops; a GPU backend runs them all in one
    launch). Params and optimizer state come back as results tagged `tec.state_update`, so codegen keeps
    them in place across steps (the optimizer writes over them, no copy); targets are tagged `tec.target`
    with the index of their output.

    Gradient accumulation (`accumulate` N > 1): each call adds its gradients into a per-param sum (state
    `<param>/grad_sum`) and counts itself (`accumulate/micro`); the N-th call updates with the mean of the N
    gradients, as one step over an N-times batch whose loss is a mean, and clears the sums. The other calls
    pass the optimizer a false gate, so params, moments, the step counter (which the schedule reads: it
    counts updates) and the loss scale stay as they were; running statistics and FP8 amaxes still follow
    every micro-batch, as in PyTorch and Transformer Engine.

    Data parallelism is always built in. Each rank's loss is the mean over its share of the global batch,
    and the backward starts from `1 / tec.world_size` instead of 1, so each rank's gradients are its share's
    part of the global batch's mean gradient: every tensor of its backward (an FP8 gradient's quantization
    included) is the one a single process with the global batch computes for those samples. The gradients
    are then summed over the ranks by `tec.all_reduce` (sum) right after the backward, in buckets of about
    `bucket-mb` MiB taken in the order the backward produces them, each placed after its last gradient; the
    loss is averaged (each rank reports the global batch's). Loss scaling's finite check and the clipping
    norm see the summed gradients, the same on every rank. On one process world_size is 1 and the
    collectives are identities: the same plan trains alone or under mpirun.

    Optimizer sharding (`shard-optimizer` N, ZeRO stage 1): the buckets are reduced with `tec.reduce_scatter`
    instead, so each rank receives its 1/N shard of each summed gradient (ops/Training.td: a flat,
    zero-padded split); it updates only its shard of each param (`tec.shard`) with moments (and gradient
    sums) of the shard's size, state tagged `tec.state_shard_of` with the whole shape and
    `tec.state_shard_ranks` with N, and `tec.all_gather` rebuilds every param on every rank, one collective
    per bucket. The finite check and the clipping norm, computed on shards, are reduced over the ranks. N is
    fixed at compile time (static shapes): the plan runs on N ranks only.
  }];
  let options = [
    Option<"loss", "loss", "::tec::Loss", "::tec::Loss::Mse", "mse | l1 | cross-entropy (targets: class indices)",
           [{::llvm::cl::values(clEnumValN(::tec::Loss::Mse, "mse", "mean squared error"),
                                clEnumValN(::tec::Loss::L1, "l1", "mean absolute error"),
                                clEnumValN(::tec::Loss::CrossEntropy, "cross-entropy", "softmax cross-entropy"))}]>,
    Option<"ignoreIndex", "ignore-index", "int64_t", "-100",
           "cross-entropy: labels of this value count for nothing (torch's default)">,
    Option<"optimizer", "optimizer", "::tec::Optimizer", "::tec::Optimizer::AdamW", "sgd | adamw",
           [{::llvm::cl::values(clEnumValN(::tec::Optimizer::Sgd, "sgd", "SGD, with momentum if set"),
                                clEnumValN(::tec::Optimizer::AdamW, "adamw", "AdamW"))}]>,
    Option<"learningRate", "lr", "double", "1e-3", "base learning rate">,
    Option<"schedule", "schedule", "::tec::LrSchedule", "::tec::LrSchedule::Constant", "constant | warmup | cosine",
           [{::llvm::cl::values(clEnumValN(::tec::LrSchedule::Constant, "constant", "the base rate"),
                                clEnumValN(::tec::LrSchedule::Warmup, "warmup", "linear warm-up, then the base rate"),
                                clEnumValN(::tec::LrSchedule::Cosine, "cosine", "warm-up, then cosine decay"))}]>,
    Option<"warmupSteps", "warmup-steps", "int64_t", "0", "linear warm-up steps">,
    Option<"totalSteps", "total-steps", "int64_t", "1", "steps of the cosine schedule">,
    Option<"momentum", "momentum", "double", "0.0", "sgd momentum">,
    Option<"nesterov", "nesterov", "bool", "false", "sgd Nesterov momentum">,
    Option<"beta1", "beta1", "double", "0.9", "adamw beta1">,
    Option<"beta2", "beta2", "double", "0.999", "adamw beta2">,
    Option<"eps", "eps", "double", "1e-8", "adamw epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.0", "weight decay">,
    Option<"clipNorm", "clip-norm", "double", "0.0", "clip gradients to this global norm (0: off)">,
    Option<"frozen", "frozen", "std::string", "\"\"", "regex of param names kept fixed (no gradient)">,
    Option<"trainable", "trainable", "std::string", "\"\"",
           "regex of param names trained even where tec would freeze them (a folded constant, a mask)">,
    Option<"lossScale", "loss-scale", "double", "0.0",
           "dynamic loss scaling from this initial scale (FP16 training; 0: off)">,
    Option<"growthInterval", "growth-interval", "int64_t", "2000", "clean steps before the loss scale doubles">,
    Option<"accumulate", "accumulate", "int64_t", "1",
           "micro-batches whose mean gradient one optimizer update applies (gradient accumulation)">,
    Option<"bucketMb", "bucket-mb", "double", "25.0",
           "data parallelism: MiB of gradients one tec.all_reduce averages over the ranks">,
    Option<"shardOptimizer", "shard-optimizer", "int64_t", "0",
           "ZeRO stage 1 over this many ranks: each holds and updates 1/N of the optimizer state (0: off)">
  ];
  let dependentDialects = ["::tec::TecDialect"];
}

#endif // TEC_PASSES
