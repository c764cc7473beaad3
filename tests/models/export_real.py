#!/usr/bin/env python3
"""Exports the model families users bring (Hugging Face GPT-2, BERT, Llama, ViT, BLOOM, Falcon and a T5 encoder, a
ResNet-18-shaped timm ResNet, torch's TransformerEncoderLayer, two MLPs, a model with one-element parameters,
Swin's patch merging, a depthwise/squeeze-excite conv net, an eval-mode BatchNorm net exported with its
BatchNormalizations kept, a U-Net, a 3-D U-Net level, LSTM and GRU stacks) with
torch.onnx.export, four ways each: the TorchScript exporter at opset 17 and the dynamo exporter at opset 18,
each with static and with dynamic batch/sequence axes (TorchScript only where torch's dynamo exporter fails). Tiny configs, random init with fixed seeds, nothing downloaded. Writes into the folder given (default:
tests/models/real):

  <arch>_<form>.onnx     the export (form: ts_static, ts_dynamic, dynamo_static, dynamo_dynamic)
  <arch>_inputs.npz      the inputs (one fixed batch), shared by the four forms
  <arch>_<form>_ort.npz  ONNX Runtime's outputs for them
  <arch>_f64.npz         for `_bn` (train mode), torch's outputs in float64, the reference instead: its
                         BatchNormalization over 2 values per channel at the end amplifies rounding, and
                         ONNX Runtime's float32 is 1e-4 off there (tec's 4e-6)
  <arch>_train.npz       torch's losses over 4 steps (4 updates) of the model, MSE against `target`, for SGD
                         (lr 0.05, or the arch's own `sgd_lr`) and AdamW (lr 1e-3, weight decay 0.01), in
                         eval mode (no dropout), or in train mode for the `_bn` ResNet (BatchNormalization
                         on the batch's statistics, its running statistics moving); for the language
                         models also `lm_labels` ([B, T] int64, a quarter -100) and `lm_sgd`, the
                         cross-entropy losses of 4 SGD steps (lr 0.05) ignoring the -100 labels
  <arch>_trained.npz     the weights torch trained, as the TorchScript exporter writes them (the trained model
                         exported again, so transposed and renamed initializers line up): `sgd/<name>`,
                         `adamw/<name>` for each float initializer; not for `resnet18`, whose export folds
                         BatchNormalization into the convolutions
  manifest.json          per export: its inputs, outputs, and the --shape a dynamic one compiles with

`./dev test` needs none of torch, transformers or timm: check_real.py compares tec with the committed
outputs. Rerun (with torch, transformers, timm, onnxscript and onnxruntime installed) to regenerate:

  python tests/models/export_real.py [folder] [--only arch,...]

`--held-out FOLDER` exports, in the same forms and files, the families checked by hand rather than committed
(GPT-NeoX, OPT, Phi, ELECTRA, ALBERT, DeBERTa-v2, CLIP vision and text, a Whisper encoder, HF and timm Swin,
timm MobileNetV3, EfficientNet-B0 and ConvNeXt at 32x32; Mistral, Qwen2, Gemma, RoBERTa, DistilBERT, GPT-J,
wav2vec2, DINOv2, SegFormer, timm ViT, and timm's RegNetX, MobileViT, GhostNet and DenseNet with their
BatchNormalizations kept; ~110 MB), for `check_real.py --models FOLDER`: their
embeddings' padding rows zero, as torch initializes them (torch never trains that row, and the export cannot
say which it is).

GPT-2 comes tied (lm_head is the token embedding, as Hugging Face ties it) and untied (`gpt2_untied`);
ResNet-18 in eval mode (the exporter folds BatchNormalization into the convolutions) and in train mode
(`resnet18_bn`, exported with TrainingMode.TRAINING: BatchNormalization with training_mode = 1).
"""
import argparse
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
    gpt2 = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=32, attn_implementation="eager")
    yield "gpt2", Wrapped(T.GPT2LMHeadModel(T.GPT2Config(**gpt2)), "causal_lm"), tokens, "input_ids"
    yield "gpt2_untied", Wrapped(T.GPT2LMHeadModel(T.GPT2Config(tie_word_embeddings=False, **gpt2)), "causal_lm"), \
        tokens, "input_ids"
    yield "bert", Wrapped(T.BertModel(T.BertConfig(vocab_size=64, max_position_embeddings=32, **small)), "hf"), tokens, \
        "input_ids"
    yield "llama", Wrapped(T.LlamaForCausalLM(T.LlamaConfig(vocab_size=64, max_position_embeddings=32,
                                                            num_key_value_heads=2, attn_implementation="eager",
                                                            **small)), "causal_lm"), tokens, "input_ids"
    yield "vit", Wrapped(T.ViTModel(T.ViTConfig(image_size=IMAGE, patch_size=4, **small)), "hf"), image, \
        "pixel_values"
    def resnet18():
        return resnet.ResNet(resnet.BasicBlock, [2, 2, 2, 2], channels=(4, 8, 16, 32), stem_width=4, num_classes=10)

    yield "resnet18", resnet18(), image, "x"
    # 64x64 so the last stage's BatchNormalization sees 8 values per channel, not 2 (at 16x16 its statistics
    # amplify float32 rounding past 1e-4 in torch's own float32 results)
    yield "resnet18_bn", resnet18(), torch.randn(BATCH, 3, 64, 64, generator=torch.Generator().manual_seed(5)), "x"
    yield "encoder", Wrapped(torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), "plain"), \
        sequence, "src"
    yield "mlp_relu", torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.ReLU(), torch.nn.Linear(48, 10)), \
        features, "x"
    yield "mlp_gelu", torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.GELU(approximate="tanh"),
                                          torch.nn.LayerNorm(32), torch.nn.Linear(32, 10)), features, "x"
    yield "scalar_params", ScalarParams(), features, "x"
    yield "patch_merging", PatchMerging(), torch.randn(BATCH, 6, 6, 4, generator=torch.Generator().manual_seed(6)), "x"
    yield "depthwise", depthwise_net(), image, "x"
    yield "t5_encoder", Wrapped(T.T5EncoderModel(T.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                            num_heads=4, relative_attention_num_buckets=8,
                                                            relative_attention_max_distance=16, dropout_rate=0.0)),
                                "hf"), tokens, "input_ids"
    yield "unet", UNet(), image, "x"
    yield "bloom", Wrapped(T.BloomForCausalLM(T.BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=4)),
                           "causal_lm"), tokens, "input_ids"
    yield "falcon", Wrapped(T.FalconForCausalLM(T.FalconConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                                               num_attention_heads=4, new_decoder_architecture=False,
                                                               bias=False, attn_implementation="eager")),
                            "causal_lm"), tokens, "input_ids"
    yield "lstm", Recurrent(torch.nn.LSTM), sequence, "x"
    yield "gru", Recurrent(torch.nn.GRU), sequence, "x"
    yield "volumetric", Volumetric(), torch.randn(BATCH, 2, 6, 8, 7, generator=torch.Generator().manual_seed(7)), "x"
    yield "default_init", DefaultInit(), image, "x"
    yield "fresh_layers", FreshLayers(), features, "x"
    yield "padded_embedding", PaddedEmbedding(), tokens, "x"
    yield "reused_layer", ReusedLayer(), sequence, "x"
    yield "cloned_layers", ClonedLayers(), sequence, "x"
    yield "batchnorm_eval", batch_norm_net(), image, "x"


def held_out_architectures():
    import timm
    import transformers as T

    tokens = torch.randint(0, 64, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    image = torch.randn(BATCH, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    mels = torch.randn(BATCH, 8, 16, generator=torch.Generator().manual_seed(3))
    small = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64)
    text = dict(vocab_size=64, max_position_embeddings=32, **small)
    yield "gpt_neox", Wrapped(T.GPTNeoXForCausalLM(T.GPTNeoXConfig(attn_implementation="eager", **text)),
                              "causal_lm"), tokens, "input_ids"
    yield "opt", Wrapped(T.OPTForCausalLM(T.OPTConfig(vocab_size=64, max_position_embeddings=32, num_hidden_layers=2,
                                                      hidden_size=32, num_attention_heads=4, ffn_dim=64,
                                                      word_embed_proj_dim=32, attn_implementation="eager")),
                         "causal_lm"), tokens, "input_ids"
    yield "phi", Wrapped(T.PhiForCausalLM(T.PhiConfig(attn_implementation="eager", **text)), "causal_lm"), tokens, \
        "input_ids"
    yield "electra", Wrapped(T.ElectraForPreTraining(T.ElectraConfig(embedding_size=16, **text)), "hf"), tokens, \
        "input_ids"
    yield "albert", Wrapped(T.AlbertModel(T.AlbertConfig(embedding_size=16, **text)), "hf"), tokens, "input_ids"
    yield "deberta", Wrapped(T.DebertaV2Model(T.DebertaV2Config(relative_attention=True, position_buckets=8,
                                                                max_relative_positions=16,
                                                                pos_att_type=["p2c", "c2p"], **text)), "hf"), \
        tokens, "input_ids"
    yield "clip_vision", Wrapped(T.CLIPVisionModel(T.CLIPVisionConfig(image_size=32, patch_size=8, **small)), "hf"), \
        image, "pixel_values"
    yield "clip_text", Wrapped(T.CLIPTextModel(T.CLIPTextConfig(**text)), "hf"), tokens, "input_ids"
    whisper = T.WhisperConfig(vocab_size=64, num_mel_bins=8, encoder_layers=2, decoder_layers=2, d_model=32,
                              encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                              decoder_ffn_dim=64, max_source_positions=8, pad_token_id=1, bos_token_id=2,
                              eos_token_id=3, decoder_start_token_id=2)
    yield "whisper_encoder", Wrapped(T.WhisperModel(whisper).encoder, "hf"), mels, "input_features"
    yield "swin", Wrapped(T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                   num_heads=[2, 4], window_size=4)), "hf"), image, "pixel_values"
    yield "swin_timm", timm.create_model("swin_tiny_patch4_window7_224", img_size=32, window_size=4, embed_dim=16,
                                         depths=(1, 1), num_heads=(2, 4), num_classes=10), image, "x"
    yield "mobilenetv3", timm.create_model("mobilenetv3_small_050", num_classes=10), image, "x"
    yield "efficientnet", timm.create_model("efficientnet_b0", num_classes=10), image, "x"
    yield "convnext", timm.create_model("convnext_atto", num_classes=10), image, "x"
    yield "mistral", Wrapped(T.MistralForCausalLM(T.MistralConfig(num_key_value_heads=2, attn_implementation="eager",
                                                                  **text)), "causal_lm"), tokens, "input_ids"
    yield "qwen2", Wrapped(T.Qwen2ForCausalLM(T.Qwen2Config(num_key_value_heads=2, attn_implementation="eager",
                                                            **text)), "causal_lm"), tokens, "input_ids"
    yield "gemma", Wrapped(T.GemmaForCausalLM(T.GemmaConfig(num_key_value_heads=1, head_dim=8,
                                                            attn_implementation="eager", **text)), "causal_lm"), \
        tokens, "input_ids"
    yield "roberta", Wrapped(T.RobertaModel(T.RobertaConfig(pad_token_id=1, **dict(text, max_position_embeddings=40))),
                             "hf"), tokens, "input_ids"
    yield "distilbert", Wrapped(T.DistilBertModel(T.DistilBertConfig(vocab_size=64, max_position_embeddings=32,
                                                                     n_layers=2, dim=32, n_heads=4, hidden_dim=64)),
                                "hf"), tokens, "input_ids"
    yield "gptj", Wrapped(T.GPTJForCausalLM(T.GPTJConfig(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                                         rotary_dim=4, attn_implementation="eager")), "causal_lm"), \
        tokens, "input_ids"
    audio = torch.randn(BATCH, 400, generator=torch.Generator().manual_seed(4))
    yield "wav2vec2", Wrapped(T.Wav2Vec2Model(T.Wav2Vec2Config(conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                                                               num_conv_pos_embeddings=8,
                                                               num_conv_pos_embedding_groups=4, mask_time_prob=0.0,
                                                               **small)), "hf"), audio, "input_values"
    yield "dinov2", Wrapped(T.Dinov2Model(T.Dinov2Config(image_size=32, patch_size=8, **small)), "hf"), image, \
        "pixel_values"
    yield "segformer", Wrapped(T.SegformerModel(T.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                                                  hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                                                                  patch_sizes=[7, 3], strides=[4, 2],
                                                                  mlp_ratios=[2, 2])), "hf"), image, "pixel_values"
    yield "vit_timm", timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2,
                                        num_heads=4, num_classes=10), image, "x"
    yield "regnet", timm.create_model("regnetx_002", num_classes=10), image, "x"
    yield "mobilevit", timm.create_model("mobilevit_xxs", num_classes=10), image, "x"
    yield "ghostnet", timm.create_model("ghostnet_050", num_classes=10), image, "x"
    yield "densenet", timm.create_model("densenet121", num_classes=10, growth_rate=8, block_config=(2, 2, 2, 2)), \
        image, "x"


def zero_padding_rows(model):
    """Each nn.Embedding's padding_idx row zero, as torch initializes it."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()


class ScalarParams(torch.nn.Module):
    """One-element parameters in each shape models have them: a Linear(8, 1)'s bias ([1]), a 0-D logit scale
    (CLIP's), a [1, 1] gain."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(24, 8)
        self.head = torch.nn.Linear(8, 1)
        self.logit_scale = torch.nn.Parameter(torch.tensor(0.3))
        self.gain = torch.nn.Parameter(torch.ones(1, 1))

    def forward(self, x):
        h = torch.tanh(self.proj(x)) * self.logit_scale.exp()
        return self.head(h) * self.gain


class PatchMerging(torch.nn.Module):
    """Swin's patch merging (x[:, 0::2, 0::2] and its three siblings, concatenated), and a step-4 slice whose
    last pick is not at the end of its dim."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(4, 8)
        self.norm = torch.nn.LayerNorm(32)
        self.reduction = torch.nn.Linear(32, 16, bias=False)
        self.sparse = torch.nn.Linear(8, 16)

    def forward(self, x):
        x = self.embed(x)
        merged = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        return self.reduction(self.norm(merged)) + self.sparse(x[:, 1::4, 1::4]).mean(dim=(1, 2), keepdim=True)


class Recurrent(torch.nn.Module):
    """A two-layer bidirectional LSTM or GRU over [B, T, 32] (batch first, as most users write it) and a
    linear head over its outputs and its last hidden states."""

    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(32, 16, num_layers=2, bidirectional=True, batch_first=True)
        self.head = torch.nn.Linear(32, 8)

    def forward(self, x):
        out, state = self.rnn(x)
        last = (state[0] if isinstance(state, tuple) else state)[-2:].transpose(0, 1).reshape(x.shape[0], 1, -1)
        return self.head(out + last)


class UNet(torch.nn.Module):
    """A two-level U-Net: strided-conv encoder, a transposed-conv (2x2, stride 2) and a bilinear upsampling
    decoder with skip connections, a nearest-upsampled side output added in (GroupNorm, not BatchNorm, so that
    the export trains as torch does)."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.enc1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
        self.enc2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.GroupNorm(4, 16), nn.SiLU())
        self.bottom = nn.Sequential(nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU())
        self.up2 = nn.ConvTranspose2d(16, 16, 2, stride=2)
        self.dec2 = nn.Sequential(nn.Conv2d(32, 8, 3, padding=1), nn.ReLU())
        self.dec1 = nn.Sequential(nn.Conv2d(16, 8, 3, padding=1), nn.ReLU())
        self.side = nn.Conv2d(16, 4, 1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        b = self.bottom(e2)
        d2 = self.dec2(torch.cat([self.up2(b), e2], 1))
        up = torch.nn.functional.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([up, e1], 1))
        side = torch.nn.functional.interpolate(self.side(b), scale_factor=4, mode="nearest")
        return self.head(d1) + side


class DefaultInit(torch.nn.Module):
    """Normalizations as torch initializes them (not randomized: KEEP_INIT): GroupNorm's and InstanceNorm's
    biases all zeros, which TorchScript writes as [C, 1, 1] initializers with made-up names."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)  # torch's initialization draws from the global generator
        nn = torch.nn
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.SiLU(), nn.Conv2d(8, 6, 1),
                                  nn.InstanceNorm2d(6, affine=True), nn.ReLU())
        self.head = nn.Linear(6, 10)

    def forward(self, x):
        return self.head(self.body(x).mean(dim=(2, 3)))


class FreshLayers(torch.nn.Module):
    """A fresh model as users export it to train (not randomized: KEEP_INIT): its LayerNorms' gains (all ones)
    and biases (all zeros) and its layer scales (all 0.1) are equal, and the TorchScript exporter merges equal
    initializers of an eval-mode model into one, read through Identity nodes named for the params it
    replaced: each of those trains apart, as in torch."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)  # torch's initialization draws from the global generator
        nn = torch.nn
        self.inp = nn.Linear(24, 32)
        self.norms = nn.ModuleList(nn.LayerNorm(32) for _ in range(3))
        self.fcs = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))
        self.scales = nn.ParameterList(nn.Parameter(torch.full((32,), 0.1)) for _ in range(3))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        h = self.inp(x)
        for norm, fc, scale in zip(self.norms, self.fcs, self.scales):
            h = h + scale * torch.nn.functional.gelu(fc(norm(h)))
        return self.head(h)


class PaddedEmbedding(torch.nn.Module):
    """Token ids through an nn.Embedding with padding_idx 0 as torch initializes it (KEEP_INIT: that row all
    zeros, and torch never trains it), mean-pooled into a Linear. The export drops padding_idx: tec finds the
    row as the table's one all-zero row and passes it no gradient, as torch does."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)  # torch's initialization draws from the global generator
        self.embed = torch.nn.Embedding(64, 16, padding_idx=0)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.embed(x).mean(dim=1))


class ReusedLayer(torch.nn.Module):
    """One Linear under two names, applied twice (ALBERT shares its layers so), and a third Linear with the
    first's weight and a bias of its own: the TorchScript exporter folds the weight's transpose once per use
    and merges them into one read through Identity nodes, which stays one param (its gradient the sum of its
    uses), unlike a fresh model's merged params and deep-copied layers' weights."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(32, 32)  # over [B, T, 32]: a MatMul by the folded transpose
        self.second = self.first
        self.third = torch.nn.Linear(32, 32)
        self.third.weight = self.first.weight
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.head(torch.tanh(self.third(torch.tanh(self.second(torch.tanh(self.first(x)))))))


class ClonedLayers(torch.nn.Module):
    """nn.TransformerEncoder as torch initializes it (KEEP_INIT), then a list of bias-free Linears cloned with
    copy.deepcopy: copies of one layer, so their weights start equal, and the TorchScript exporter merges the
    transposes it folded of them into one, read in the later layers through exporter-named Identity nodes.
    Deep copies of the module reading the source read them (the encoder's layers: their biases were merged
    too; the bias-free clones: entries of one list): each is a param of its own and trains apart, as in
    torch."""

    def __init__(self):
        super().__init__()
        import copy
        torch.manual_seed(0)  # torch's initialization draws from the global generator
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        mixer = torch.nn.Linear(32, 32, bias=False)
        self.mixers = torch.nn.ModuleList(copy.deepcopy(mixer) for _ in range(2))
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        h = self.encoder(x)
        for mixer in self.mixers:
            h = h + torch.tanh(mixer(h))
        return self.head(h)


class Volumetric(torch.nn.Module):
    """A 3-D U-Net level as video and medical-imaging nets have it: Conv3d (padded, strided, grouped,
    anisotropic kernels), MaxPool3d, AvgPool3d with ceil mode, ConvTranspose3d (stride 2, output_padding),
    a skip connection, over a [B, 2, 6, 8, 7] volume (odd sizes, not multiples of the strides)."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv3d(2, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
        self.down = nn.Sequential(nn.MaxPool3d(2, ceil_mode=True), nn.Conv3d(8, 8, (1, 3, 3), padding=(0, 1, 1), groups=2),
                                  nn.ReLU(), nn.Conv3d(8, 16, 3, stride=(1, 2, 2), padding=(2, 1, 1), dilation=(2, 1, 1)))
        self.up = nn.ConvTranspose3d(16, 8, 3, stride=(2, 4, 4), padding=1, output_padding=(1, 3, 3))
        self.side = nn.AvgPool3d((2, 3, 3), stride=2, padding=(0, 1, 1), ceil_mode=True, count_include_pad=False)
        self.head = nn.Conv3d(16, 4, 1)
        self.proj = nn.Linear(8, 3)

    def forward(self, x):
        s = self.stem(x)
        u = self.up(self.down(s))[:, :, :s.shape[2], :s.shape[3], :s.shape[4]]
        y = self.head(torch.cat([u, s], 1))
        return y.mean(dim=(3, 4)) + self.proj(self.side(s).amax(dim=(2, 3, 4)))[:, None, :].transpose(1, 2)[:, :1]


class SqueezeExcite(torch.nn.Module):
    def __init__(self, channels, squeezed):
        super().__init__()
        self.reduce = torch.nn.Conv2d(channels, squeezed, 1)
        self.expand = torch.nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        s = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        return x * torch.nn.functional.hardsigmoid(self.expand(torch.relu(self.reduce(s))))


def batch_norm_net():
    """Pre-activation convolutions (DenseNet's and ResNet-v2's BatchNorm, ReLU, Conv) in eval mode, exported
    with the BatchNormalizations kept (KEEP_BATCH_NORM), as for fine-tuning with frozen statistics: three of
    8 channels whose running statistics are torch's initial ones, equal, which the TorchScript exporter merges
    into the first layer's, read by the others through Identity nodes."""
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1),
                         nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                         nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 1),
                         nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def depthwise_net():
    """MobileNetV3's pieces without BatchNormalization: a strided stem, a depthwise 3x3 with hardswish, squeeze
    and excite, a pointwise projection, a 5x5 depthwise with stride 2, pooling and a classifier."""
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.Hardswish(),
                         nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Hardswish(), SqueezeExcite(8, 4),
                         nn.Conv2d(8, 16, 1), nn.ReLU(), nn.Conv2d(16, 16, 5, stride=2, padding=2, groups=16),
                         nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def dynamic_axes(x):
    """batch, and sequence for token and sequence inputs (not for images or feature vectors)."""
    axes = {0: "batch"}
    if x.dim() >= 2 and x.dim() != 4 and x.shape[1] == SEQ:
        axes[1] = "sequence"
    return axes


def export(model, x, name, path, dynamo, dynamic, train_mode=False, optimize=True, keep_batch_norm=False):
    kwargs = dict(input_names=[name], output_names=["y"], opset_version=18 if dynamo else 17, dynamo=dynamo)
    if keep_batch_norm:  # eval mode, BatchNormalization not folded into the convolutions
        if dynamo:
            optimize = False
        else:
            kwargs["training"] = torch.onnx.TrainingMode.PRESERVE
    if dynamo:
        kwargs["external_data"] = False
        kwargs["optimize"] = optimize
        if dynamic:
            kwargs["dynamic_shapes"] = ({d: torch.export.Dim(n, min=2, max=64) for d, n in dynamic_axes(x).items()},)
    elif dynamic:
        kwargs["dynamic_axes"] = {name: dynamic_axes(x), "y": dynamic_axes(x)}
    if not (train_mode and not dynamo):
        torch.onnx.export(model, (x,), path, **kwargs)
        return
    # Tracing runs the forward in train mode, which moves the running statistics: put them back, in the
    # module and in the file, so the export holds the statistics the module had.
    import onnx
    from onnx import numpy_helper

    kwargs["training"] = torch.onnx.TrainingMode.TRAINING
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torch.onnx.export(model, (x,), path, **kwargs)
    model.load_state_dict(state)
    exported = onnx.load(path)
    for init in exported.graph.initializer:
        if init.name in state:
            init.CopyFrom(numpy_helper.from_array(state[init.name].numpy(), init.name))
    onnx.save(exported, path)


# Language models: also trained with next-token cross-entropy (labels with ignored padding).
LANGUAGE_MODELS = {"gpt2", "gpt2_untied", "llama", "bloom", "falcon"}
# Architectures that train in train mode (BatchNormalization on batch statistics), exported that way.
TRAIN_MODE = {"resnet18_bn"}
# Trained from torch's own initialization (zero biases), as users start: the others are randomized.
KEEP_INIT = {"default_init", "fresh_layers", "padded_embedding", "cloned_layers"}
# Exported by dynamo without its optimizer, which merges equal initializers into one param (the TorchScript
# exporter's merges, through Identity nodes, tec takes apart itself): trained from a fresh model, as users do.
UNMERGED = {"fresh_layers", "cloned_layers"}
# Eval-mode exports whose BatchNormalizations are kept, not folded into the convolutions: TorchScript with
# TrainingMode.PRESERVE, dynamo without its optimizer (which fuses them).
KEEP_BATCH_NORM = {"batchnorm_eval", "regnet", "mobilevit", "ghostnet", "densenet"}
# Architectures torch's dynamo exporter cannot export (torch 2.15): TorchScript forms only.
TORCHSCRIPT_ONLY = {"t5_encoder": "aten.view of T5's transposed attention output fails in torch.export's decomposition",
                    "swin": "torch.export fails on HF Swin's window partition",
                    "swin_timm": "torch.export fails on timm Swin's window partition"}
# Eval-mode exports whose convolutions carry BatchNormalization folded in: torch's trained weights (conv and
# BatchNormalization apart) have no counterpart in the export, so none are written.
FOLDS_BATCH_NORM = {"resnet18", "mobilenetv3", "efficientnet"}
# SGD's learning rate where 0.05 diverges in torch itself (ResNet's loss starts at ~25).
SGD_LR = {"resnet18": 1e-3, "resnet18_bn": 0.01, "electra": 1e-3, "mobilenetv3": 1e-3, "efficientnet": 1e-3,
          "mobilevit": 1e-3, "densenet": 1e-3, "regnet": 1e-5, "ghostnet": 1e-5}

TRAIN_STEPS = 4
OPTIMIZERS = {"sgd": lambda p, lr: torch.optim.SGD(p, lr=lr or 0.05),
              "adamw": lambda p, lr: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01)}


def training_reference(model, x, seed, arch, name):
    """Losses of TRAIN_STEPS steps from the exported weights per optimizer, the target they chase, and the
    trained weights as the TorchScript exporter writes them."""
    import copy
    import tempfile

    import onnx
    from onnx import numpy_helper

    train_mode = arch in TRAIN_MODE
    with torch.no_grad():
        shape = copy.deepcopy(model).eval()(x).shape
    target = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 0.5
    losses, weights = {}, {}
    for opt, make in OPTIMIZERS.items():
        trained = copy.deepcopy(model).train(train_mode)
        optimizer = make(trained.parameters(), SGD_LR.get(arch))
        history = []
        for _ in range(TRAIN_STEPS):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(trained(x), target)
            loss.backward()
            optimizer.step()
            history.append(loss.item())
        losses[opt] = np.array(history, np.float64)
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "trained.onnx")
            export(trained, x, name, path, dynamo=False, dynamic=False, train_mode=train_mode,
                   keep_batch_norm=arch in KEEP_BATCH_NORM)
            for init in onnx.load(path).graph.initializer:
                w = numpy_helper.to_array(init)
                if w.dtype == np.float32:  # one-element ones too: a [1] bias or a 0-D scale trains as any
                    weights[f"{opt}/{init.name}"] = w
    if arch in SGD_LR:
        losses["sgd_lr"] = np.array(SGD_LR[arch], np.float64)
    if arch in LANGUAGE_MODELS:
        losses.update(language_model_reference(model, x, seed))
    return target.numpy(), losses, weights


def language_model_reference(model, x, seed):
    """Next-token cross-entropy over [B, T, V] logits against [B, T] int64 labels, a quarter of them -100
    (padding, ignored: the loss is the mean over the others), for TRAIN_STEPS SGD steps at lr 0.05."""
    import copy

    trained = copy.deepcopy(model).eval()
    with torch.no_grad():
        vocab = trained(x).shape[-1]
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, vocab, x.shape, generator=g)
    labels[torch.rand(x.shape, generator=g) < 0.25] = -100
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.05)
    history = []
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        logits = trained(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), ignore_index=-100)
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return {"lm_labels": labels.numpy(), "lm_sgd": np.array(history, np.float64)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "real"))
    parser.add_argument("--only", help="comma-separated architectures to export again; the manifest keeps the others")
    parser.add_argument("--held-out", metavar="FOLDER", help="export the families checked by hand into FOLDER")
    args = parser.parse_args()
    out, only = args.held_out or args.folder, set(args.only.split(",")) if args.only else None
    families = held_out_architectures if args.held_out else architectures
    os.makedirs(out, exist_ok=True)
    manifest = []
    kept = []
    if only and os.path.exists(os.path.join(out, "manifest.json")):
        with open(os.path.join(out, "manifest.json")) as f:
            kept = [e for e in json.load(f) if e["arch"] not in only]
    for seed, (arch, model, x, name) in enumerate(families()):  # seeds by position, whatever --only says
        if only and arch not in only:
            continue
        if arch not in KEEP_INIT:
            randomize(model, 100 + seed)
        if args.held_out:
            zero_padding_rows(model)
        model.train(arch in TRAIN_MODE)
        np.savez(os.path.join(out, f"{arch}_inputs.npz"), **{name: x.numpy()})
        target, losses, weights = training_reference(model, x, 200 + seed, arch, name)
        np.savez(os.path.join(out, f"{arch}_train.npz"), target=target, **losses)
        if arch not in FOLDS_BATCH_NORM:
            np.savez(os.path.join(out, f"{arch}_trained.npz"), **weights)
        train_mode = arch in TRAIN_MODE
        if train_mode:  # batch statistics of a batch of 2 at 1x1: ill-conditioned, so float64 is the reference
            import copy
            with torch.no_grad():
                exact = copy.deepcopy(model).double()(x.double()).float().numpy()
            np.savez(os.path.join(out, f"{arch}_f64.npz"), y=exact)
        # The dynamo exporter has no training mode: it writes inference BatchNormalization.
        for dynamo in (False,) if train_mode or arch in TORCHSCRIPT_ONLY else (False, True):
            for dynamic in (False, True):
                form = f"{'dynamo' if dynamo else 'ts'}_{'dynamic' if dynamic else 'static'}"
                path = os.path.join(out, f"{arch}_{form}.onnx")
                export(model, x, name, path, dynamo, dynamic, train_mode, optimize=arch not in UNMERGED,
                       keep_batch_norm=arch in KEEP_BATCH_NORM)
                session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                feeds = {session.get_inputs()[0].name: x.numpy()}
                outputs = session.run(None, feeds)
                names = [o.name for o in session.get_outputs()]
                np.savez(os.path.join(out, f"{arch}_{form}_ort.npz"), **dict(zip(names, outputs)))
                shapes = sorted({d for i in session.get_inputs() for d in i.shape if isinstance(d, str)})
                manifest.append({"arch": arch, "form": form, "model": os.path.basename(path),
                                 "inputs": f"{arch}_inputs.npz", "input": feeds and list(feeds)[0],
                                 "reference": f"{arch}_f64.npz" if train_mode else f"{arch}_{form}_ort.npz",
                                 "shape": ",".join(f"{d}={DIMS.get(d, -1)}" for d in shapes)})
                print(f"{arch:10s} {form:15s} {os.path.getsize(path):8d} bytes  dynamic dims: {shapes or '-'}")
    order = [arch for arch, *_ in families()]
    manifest = sorted(kept + manifest, key=lambda e: order.index(e["arch"]) if e["arch"] in order else len(order))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
