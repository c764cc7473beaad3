#!/usr/bin/env python3
"""Operators in the forms exporters write them, one small onnx.helper model each (f32 and integer
inputs, seeded), through tec (compile for the CPU, `tec run`) and ONNX Runtime: every output must match
within 1e-4 relative (1e-5 absolute near zero), integers exactly. ONNX's own node tests cover many of these
operators only in f64, which tec does not run, or in a single form; these are the forms that occur in
torch.onnx and Hugging Face exports (Einsum equations, CumSum masks and positions, ScatterND updates)."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

RTOL, ATOL = 1e-4, 1e-5
SCATTER = ["data", "indices", "updates"]
ELEMENT = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
           np.dtype(np.int32): TensorProto.INT32}


def make(name, op, inputs, attrs=None, constants=None, opset=18, order=None, check=True, outputs=1):
    """A one-node model: `inputs` (name -> array) are graph inputs, `constants` initializers; the node
    reads them in `order` (default: inputs, then constants; "" skips an optional input) and writes `outputs`
    outputs (y, then y1, y2...). Returns (name, model, inputs, expected): expected None (ONNX Runtime is the
    oracle) unless the caller computes it."""
    constants = constants or {}
    names = ["y"] + [f"y{i}" for i in range(1, outputs)]
    node = helper.make_node(op, order or list(inputs) + list(constants), names, name=name, **(attrs or {}))
    graph = helper.make_graph(
        [node], name, [helper.make_tensor_value_info(k, ELEMENT[v.dtype], v.shape) for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in names],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    if not check:  # a model ONNX's own inference refuses: the output typed as the first input
        model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", ELEMENT[next(iter(inputs.values())).dtype],
                                                                     None))
        return name, model, inputs, None
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)  # types the output
    onnx.checker.check_model(model)
    return name, model, inputs, None


def cases():
    rng = np.random.default_rng(7)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    einsums = [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("bqhd,bkhd->bhqk", [(2, 5, 3, 4), (2, 6, 3, 4)]),
               ("bhqk,bkhd->bqhd", [(2, 3, 5, 6), (2, 6, 3, 4)]), ("i,j->ij", [(5,), (4,)]), ("ij->ji", [(3, 4)]),
               ("ij->i", [(3, 4)]), ("i,i", [(6,), (6,)]), ("ij,jk", [(3, 4), (4, 2)]),
               ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 2)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
               ("bhld,lrd->bhlr", [(2, 3, 4, 5), (4, 6, 5)]), ("ij,ij->ij", [(3, 4), (3, 4)]),
               ("b i d, b j d -> b i j", [(2, 3, 4), (2, 5, 4)]), ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)])]
    for k, (equation, shapes) in enumerate(einsums):
        yield make(f"einsum_{k}", "Einsum", {f"x{i}": f32(*s) for i, s in enumerate(shapes)}, {"equation": equation})

    # Ellipsis dims broadcast (1 against n) as numpy's einsum does; ONNX Runtime refuses these, so numpy is
    # the oracle.
    for k, (equation, shapes) in enumerate([("...i,...i->...", [(2, 1, 3), (4, 3)]),
                                            ("...ij,...jk->...ik", [(1, 3, 2, 4), (5, 1, 4, 2)])]):
        name, model, inputs, _ = make(f"einsum_broadcast_{k}", "Einsum", {f"x{i}": f32(*s) for i, s in enumerate(shapes)},
                                      {"equation": equation}, check=False)
        yield name, model, inputs, np.einsum(equation, *inputs.values())

    for exclusive in (0, 1):
        for reverse in (0, 1):
            yield make(f"cumsum_f32_e{exclusive}_r{reverse}", "CumSum", {"x": f32(3, 5, 4)},
                       {"exclusive": exclusive, "reverse": reverse}, {"axis": np.array(1, np.int64)})
    # Position ids as HF computes them from an attention mask: cumsum(mask, -1) over int64.
    yield make("cumsum_i64_positions", "CumSum", {"mask": rng.integers(0, 2, (2, 7)).astype(np.int64)}, {},
               {"axis": np.array(-1, np.int32)})
    yield make("cumsum_i32_reverse", "CumSum", {"x": rng.integers(-5, 5, (4, 3)).astype(np.int32)}, {"reverse": 1},
               {"axis": np.array(0, np.int64)})

    yield make("scatternd_rows", "ScatterND", {"data": f32(4, 5, 3), "updates": f32(2, 5, 3)}, {},
               {"indices": np.array([[3], [1]], np.int64)}, order=SCATTER)
    yield make("scatternd_elements", "ScatterND", {"data": f32(4, 5), "updates": f32(3)}, {},
               {"indices": np.array([[0, 1], [3, 4], [2, 0]], np.int64)}, order=SCATTER)
    yield make("scatternd_add_duplicates", "ScatterND", {"data": f32(4, 3), "updates": f32(3, 3)},
               {"reduction": "add"}, {"indices": np.array([[1], [1], [-1]], np.int64)}, order=SCATTER)

    # The integer forms of elementwise ops exporters write for relative-position buckets (T5, DeBERTa) and
    # masks, with the extremes that wrap (|INT_MIN| = INT_MIN) and mixed signs for Div (truncation) and Mod.
    for dtype in (np.int32, np.int64):
        info = np.iinfo(dtype)
        x = np.concatenate([rng.integers(-50, 50, 13), [0, info.min, info.max]]).astype(dtype).reshape(4, 4)
        bits = np.dtype(dtype).itemsize * 8
        for op in ("Abs", "Neg", "Sign"):
            yield make(f"{op.lower()}_i{bits}", op, {"x": x})
        y = rng.integers(1, 9, (4, 4)).astype(dtype) * np.where(rng.random((4, 4)) < 0.5, -1, 1).astype(dtype)
        for op in ("Min", "Max", "Div"):
            yield make(f"{op.lower()}_i{bits}", op, {"a": x, "b": y})
        yield make(f"mod_i{bits}", "Mod", {"a": x, "b": y})
        yield make(f"fmod_i{bits}", "Mod", {"a": x, "b": y}, {"fmod": 1})

    # Resize as torch.onnx writes F.interpolate: nearest (asymmetric, floor), bilinear and bicubic (half_pixel,
    # pytorch_half_pixel, align_corners), by scales and by sizes, up and down, non-integer ratios.
    image = f32(2, 3, 5, 7)
    forms = [("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
             ("nearest", "tf_half_pixel_for_nn", "round_prefer_ceil"), ("linear", "half_pixel", None),
             ("linear", "pytorch_half_pixel", None), ("linear", "align_corners", None), ("linear", "asymmetric", None),
             ("cubic", "half_pixel", None), ("cubic", "align_corners", None)]
    for mode, transform, nearest in forms:
        attrs = {"mode": mode, "coordinate_transformation_mode": transform}
        if nearest:
            attrs["nearest_mode"] = nearest
        tag = f"{mode}_{transform}"
        yield make(f"resize_scales_up_{tag}", "Resize", {"x": image}, attrs,
                   {"roi": np.array([], np.float32), "scales": np.array([1, 1, 2, 1.5], np.float32)})
        yield make(f"resize_sizes_down_{tag}", "Resize", {"x": image}, attrs,
                   {"roi": np.array([], np.float32), "scales": np.array([], np.float32),
                    "sizes": np.array([2, 3, 3, 4], np.int64)})
    yield make("resize_cubic_exclude_outside", "Resize", {"x": image},
               {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
               {"roi": np.array([], np.float32), "scales": np.array([1, 1, 1.6, 0.6], np.float32)})
    yield make("resize_1d_linear", "Resize", {"x": f32(2, 3, 9)}, {"mode": "linear"},
               {"roi": np.array([], np.float32), "scales": np.array([1, 1, 2], np.float32)})

    # ConvTranspose as exporters write it: a U-Net's 2x2 stride-2 upsampling, output_padding, groups,
    # dilation, 1-D, output_shape, SAME_UPPER.
    transposed = [("unet_up", f32(2, 8, 4, 5), f32(8, 4, 2, 2), {"strides": [2, 2]}),
                  ("output_padding", f32(1, 4, 3, 3), f32(4, 2, 3, 3),
                   {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
                  ("groups_dilation", f32(2, 6, 4, 4), f32(6, 2, 3, 3), {"group": 3, "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
                  ("conv1d", f32(2, 4, 7), f32(4, 3, 4), {"strides": [3], "pads": [1, 2]}),
                  ("output_shape", f32(1, 2, 3, 3), f32(2, 3, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
                  ("same_upper", f32(1, 2, 3, 4), f32(2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"})]
    for name, x, w, attrs in transposed:
        yield make(f"conv_transpose_{name}", "ConvTranspose", {"x": x}, attrs,
                   {"w": w, "b": f32(w.shape[1] * attrs.get("group", 1))})

    # 3-D windows (video and volumetric nets: Conv3d, ConvTranspose3d, MaxPool3d, AvgPool3d): strides, pads,
    # dilation and groups per dim, depth rows no window reaches, ceil mode, both average divisors.
    volumetric = [("basic", f32(2, 3, 5, 6, 7), f32(4, 3, 3, 3, 3), {"pads": [1] * 6}),
                  ("strided_dilated_groups", f32(1, 4, 7, 6, 5), f32(6, 2, 2, 3, 2),
                   {"group": 2, "strides": [2, 1, 2], "dilations": [2, 1, 1], "pads": [1, 0, 1, 0, 1, 1]}),
                  ("same_lower", f32(1, 2, 5, 5, 4), f32(3, 2, 3, 3, 3), {"strides": [2, 2, 2], "auto_pad": "SAME_LOWER"}),
                  ("depthwise", f32(2, 4, 4, 5, 5), f32(4, 1, 3, 3, 3), {"group": 4, "pads": [1] * 6}),
                  ("unread_rows", f32(1, 2, 8, 5, 5), f32(3, 2, 3, 1, 1), {"strides": [3, 1, 1]})]
    for name, x, w, attrs in volumetric:
        yield make(f"conv3d_{name}", "Conv", {"x": x}, attrs, {"w": w, "b": f32(w.shape[0])})
    transposed3d = [("up", f32(2, 4, 3, 4, 5), f32(4, 3, 2, 2, 2), {"strides": [2, 2, 2]}),
                    ("output_padding", f32(1, 4, 3, 3, 3), f32(4, 2, 3, 3, 3),
                     {"strides": [2, 2, 2], "pads": [1] * 6, "output_padding": [1, 1, 1]}),
                    ("groups_dilation", f32(1, 6, 3, 4, 3), f32(6, 2, 3, 2, 3),
                     {"group": 3, "dilations": [2, 1, 1], "strides": [1, 2, 1], "pads": [1, 0, 0, 2, 1, 1]}),
                    ("cropped", f32(2, 2, 4, 3, 3), f32(2, 2, 2, 3, 3), {"strides": [3, 1, 2], "pads": [2, 1, 0, 3, 1, 1]})]
    for name, x, w, attrs in transposed3d:
        yield make(f"conv_transpose3d_{name}", "ConvTranspose", {"x": x}, attrs,
                   {"w": w, "b": f32(w.shape[1] * attrs.get("group", 1))})
    pools3d = [("MaxPool", "padded", f32(2, 3, 6, 7, 5), {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1] * 6}),
               ("MaxPool", "ceil_dilated", f32(1, 2, 7, 5, 6),
                {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2], "dilations": [2, 1, 1], "ceil_mode": 1}),
               ("AveragePool", "exclude_pad", f32(2, 3, 6, 7, 5),
                {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1] * 6}),
               ("AveragePool", "include_pad_ceil", f32(1, 2, 6, 5, 7),
                {"kernel_shape": [3, 2, 3], "strides": [2, 2, 2], "pads": [1, 0, 1, 1, 0, 0], "ceil_mode": 1,
                 "count_include_pad": 1}),
               ("AveragePool", "plain", f32(2, 4, 4, 6, 8), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]})]
    for op, name, x, attrs in pools3d:
        yield make(f"{op.lower()}3d_{name}", op, {"x": x}, attrs)

    # Recurrent ops in their forms: bidirectional with sequence lengths and initial states, reverse, GRU with
    # and without linear_before_reset, peepholes, clip; sequence lengths are graph inputs.
    T, B, I, H = 5, 3, 4, 6
    lens = np.array([5, 2, 4], np.int32)
    for op, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
        for direction in ("forward", "reverse", "bidirectional"):
            dirs = 2 if direction == "bidirectional" else 1
            weights = {"W": f32(dirs, gates * H, I) * 0.5, "R": f32(dirs, gates * H, H) * 0.5,
                       "B": f32(dirs, 2 * gates * H) * 0.2}
            states = {"initial_h": f32(dirs, B, H)}
            if op == "LSTM":
                states["initial_c"] = f32(dirs, B, H)
            attrs = {"hidden_size": H, "direction": direction}
            order = ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (["initial_c"] if op == "LSTM" else [])
            yield make(f"{op.lower()}_{direction}_lengths", op, {"X": f32(T, B, I), "sequence_lens": lens, **states},
                       attrs, weights, order=order, outputs=3 if op == "LSTM" else 2)
            if op == "GRU":
                yield make(f"gru_{direction}_linear_before_reset", op, {"X": f32(T, B, I)},
                           {**attrs, "linear_before_reset": 1}, weights, order=["X", "W", "R", "B"], outputs=2)
    # (ONNX Runtime has no batch-first layout: ONNX's own node tests check it.)
    yield make("lstm_peepholes_clip", "LSTM", {"X": f32(T, B, I)}, {"hidden_size": H, "clip": 1.5},
               {"W": f32(1, 4 * H, I), "R": f32(1, 4 * H, H), "B": f32(1, 8 * H), "P": f32(1, 3 * H)},
               order=["X", "W", "R", "B", "", "", "", "P"], outputs=3)

    yield make("lrn", "LRN", {"x": f32(2, 6, 4, 3)}, {"size": 3, "alpha": 2e-4, "beta": 0.75, "bias": 2.0})
    yield make("lrn_size_5", "LRN", {"x": f32(1, 7, 2, 5)}, {"size": 5})  # ORT: odd sizes, 4-D only


def run_tec(tec, name, model, inputs, work):
    path = os.path.join(work, name + ".onnx")
    onnx.save(model, path)
    plan = os.path.join(work, name + ".tecplan")
    r = subprocess.run([tec, path, "-o", plan, "--target", "cpu"], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("compile failed: " + r.stderr.strip())
    flags = []
    for k, v in inputs.items():
        np.save(os.path.join(work, f"{name}.{k}.npy"), v)
        flags += ["--input", f"{k}={os.path.join(work, f'{name}.{k}.npy')}"]
    out = os.path.join(work, name + ".out")
    r = subprocess.run([tec, "run", plan, "--iterations", "1", "--warmup", "0", "--output-dir", out] + flags,
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("run failed: " + r.stderr.strip())
    return [np.load(os.path.join(out, o.name + ".npy")) for o in model.graph.output]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tec", required=True)
    args = parser.parse_args()
    failures = total = 0
    with tempfile.TemporaryDirectory() as work:
        for name, model, inputs, expected in cases():
            total += 1
            wants = [expected] if expected is not None else ort.InferenceSession(
                model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)
            try:
                gots = run_tec(args.tec, name, model, inputs, work)
            except RuntimeError as e:
                print(f"FAIL {name}: {e}")
                failures += 1
                continue
            ok, details = True, []
            for output, got, want in zip(model.graph.output, gots, wants):
                if got.shape != want.shape or got.dtype != want.dtype:
                    good, detail = False, f"{got.dtype}{list(got.shape)} vs ONNX Runtime's {want.dtype}{list(want.shape)}"
                elif np.issubdtype(want.dtype, np.integer):
                    good = np.array_equal(got, want)
                    detail = "exact" if good else "integers differ"
                else:
                    good = np.allclose(got, want, rtol=RTOL, atol=ATOL)
                    detail = f"max abs error {np.abs(got - want).max():.3g}"
                ok &= good
                details.append(detail if len(gots) == 1 else f"{output.name}: {detail}")
            print(f"{'ok  ' if ok else 'FAIL'} {name} ({model.graph.node[0].op_type}): {', '.join(details)}")
            failures += not ok
    print(f"{total - failures} of {total} operator models match ONNX Runtime (numpy where it refuses the model)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
