#!/usr/bin/env python3
"""Exports the model families users bring (Hugging Face GPT-2, BERT, Llama and ViT, a ResNet-18-shaped timm
ResNet, torch's TransformerEncoderLayer, two MLPs) with torch.onnx.export, four ways each: the TorchScript
exporter at opset 17 and the dynamo exporter at opset 18, each with static and with dynamic batch/sequence
axes. Tiny configs, random init with fixed seeds, nothing downloaded. Writes into the folder given (default:
tests/models/real):

  <arch>_<form>.onnx     the export (form: ts_static, ts_dynamic, dynamo_static, dynamo_dynamic)
  <arch>_inputs.npz      the inputs (one fixed batch), shared by the four forms
  <arch>_<form>_ort.npz  ONNX Runtime's outputs for them
  <arch>_train.npz       torch's losses over 4 steps (3 updates) of the model, MSE against `target`, for SGD
                         (lr 0.05) and AdamW (lr 1e-3, weight decay 0.01), in eval mode (no dropout)
  manifest.json          per export: its inputs, outputs, and the --shape a dynamic one compiles with

`./dev test` needs none of torch, transformers or timm: check_real.py compares tec with the committed
outputs. Rerun (with torch, transformers, timm, onnxscript and onnxruntime installed) to regenerate:

  python tests/models/export_real.py [folder]
"""
import json
import os
import sys
import warnings

import numpy as np
import onnxruntime as ort
import torch

warnings.filterwarnings("ignore")

BATCH, SEQ, IMAGE = 2, 8, 16
# The dim names dynamic exports carry; check_real.py binds them with --shape batch=2,sequence=8.
DIMS = {"batch": BATCH, "sequence": SEQ}


class Wrapped(torch.nn.Module):
    """The module as a plain function of its tensor inputs, returning one tensor (no caches, no dicts)."""

    def __init__(self, model, kind):
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, x):
        if self.kind == "causal_lm":  # positions and mask passed, as generation code does
            positions = torch.arange(x.shape[1]).unsqueeze(0).expand(x.shape[0], -1)
            return self.model(x, position_ids=positions, attention_mask=torch.ones_like(x), use_cache=False,
                              return_dict=False)[0]
        if self.kind == "hf":
            return self.model(x, return_dict=False)[0]
        return self.model(x)


def randomize(model, seed):
    """Every parameter random (LayerNorm gains too), so exporters merge no identical initializers."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            # Weights ~ N(0, 1/fan_in) keep activations O(1) through deep stacks; vectors near 1 (gains).
            fan_in = p[0].numel() if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=g) * (fan_in ** -0.5 if p.dim() > 1 else 0.5) +
                    (1.0 if p.dim() == 1 else 0.0))
    return model


def architectures():
    import timm.models.resnet as resnet
    import transformers as T

    tokens = torch.randint(0, 64, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    image = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(2))
    sequence = torch.randn(BATCH, SEQ, 32, generator=torch.Generator().manual_seed(3))
    features = torch.randn(BATCH, 24, generator=torch.Generator().manual_seed(4))
    small = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64)
    yield "gpt2", Wrapped(T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=32,
                                                         attn_implementation="eager")), "causal_lm"), tokens, "input_ids"
    yield "bert", Wrapped(T.BertModel(T.BertConfig(vocab_size=64, max_position_embeddings=32, **small)), "hf"), tokens, \
        "input_ids"
    yield "llama", Wrapped(T.LlamaForCausalLM(T.LlamaConfig(vocab_size=64, max_position_embeddings=32,
                                                            num_key_value_heads=2, attn_implementation="eager",
                                                            **small)), "causal_lm"), tokens, "input_ids"
    yield "vit", Wrapped(T.ViTModel(T.ViTConfig(image_size=IMAGE, patch_size=4, **small)), "hf"), image, \
        "pixel_values"
    yield "resnet18", resnet.ResNet(resnet.BasicBlock, [2, 2, 2, 2], channels=(4, 8, 16, 32), stem_width=4,
                                    num_classes=10), image, "x"
    yield "encoder", Wrapped(torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), "plain"), \
        sequence, "src"
    yield "mlp_relu", torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.ReLU(), torch.nn.Linear(48, 10)), \
        features, "x"
    yield "mlp_gelu", torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.GELU(approximate="tanh"),
                                          torch.nn.LayerNorm(32), torch.nn.Linear(32, 10)), features, "x"


def dynamic_axes(x):
    """batch, and sequence for token and sequence inputs (not for images or feature vectors)."""
    axes = {0: "batch"}
    if x.dim() >= 2 and x.dim() != 4 and x.shape[1] == SEQ:
        axes[1] = "sequence"
    return axes


def export(model, x, name, path, dynamo, dynamic):
    kwargs = dict(input_names=[name], output_names=["y"], opset_version=18 if dynamo else 17, dynamo=dynamo)
    if dynamo:
        kwargs["external_data"] = False
        if dynamic:
            kwargs["dynamic_shapes"] = ({d: torch.export.Dim(n, min=2, max=64) for d, n in dynamic_axes(x).items()},)
    elif dynamic:
        kwargs["dynamic_axes"] = {name: dynamic_axes(x), "y": dynamic_axes(x)}
    torch.onnx.export(model, (x,), path, **kwargs)


TRAIN_STEPS = 4
OPTIMIZERS = {"sgd": lambda p: torch.optim.SGD(p, lr=0.05), "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01)}


def training_reference(model, x, seed):
    """Losses of TRAIN_STEPS steps from the exported weights, per optimizer, and the target they chase."""
    import copy

    with torch.no_grad():
        shape = model(x).shape
    target = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 0.5
    losses = {}
    for name, make in OPTIMIZERS.items():
        trained = copy.deepcopy(model).eval()
        optimizer = make(trained.parameters())
        history = []
        for _ in range(TRAIN_STEPS):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(trained(x), target)
            loss.backward()
            optimizer.step()
            history.append(loss.item())
        losses[name] = np.array(history, np.float64)
    return target.numpy(), losses


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "real")
    os.makedirs(out, exist_ok=True)
    manifest = []
    for seed, (arch, model, x, name) in enumerate(architectures()):
        randomize(model, 100 + seed).eval()
        np.savez(os.path.join(out, f"{arch}_inputs.npz"), **{name: x.numpy()})
        target, losses = training_reference(model, x, 200 + seed)
        np.savez(os.path.join(out, f"{arch}_train.npz"), target=target, **losses)
        for dynamo in (False, True):
            for dynamic in (False, True):
                form = f"{'dynamo' if dynamo else 'ts'}_{'dynamic' if dynamic else 'static'}"
                path = os.path.join(out, f"{arch}_{form}.onnx")
                export(model, x, name, path, dynamo, dynamic)
                session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                feeds = {session.get_inputs()[0].name: x.numpy()}
                outputs = session.run(None, feeds)
                names = [o.name for o in session.get_outputs()]
                np.savez(os.path.join(out, f"{arch}_{form}_ort.npz"), **dict(zip(names, outputs)))
                shapes = sorted({d for i in session.get_inputs() for d in i.shape if isinstance(d, str)})
                manifest.append({"arch": arch, "form": form, "model": os.path.basename(path),
                                 "inputs": f"{arch}_inputs.npz", "input": feeds and list(feeds)[0],
                                 "reference": f"{arch}_{form}_ort.npz",
                                 "shape": ",".join(f"{d}={DIMS.get(d, -1)}" for d in shapes)})
                print(f"{arch:10s} {form:15s} {os.path.getsize(path):8d} bytes  dynamic dims: {shapes or '-'}")
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
