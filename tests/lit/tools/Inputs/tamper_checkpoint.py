"""Copies a good checkpoint folder into one bad variant per class of corruption tec must refuse.

Usage: tamper_checkpoint.py GOOD_DIR OUT_DIR   (OUT_DIR/<class>/ is a checkpoint folder with `latest`)
"""
import json
import os
import shutil
import sys

import numpy as np


def variant(good, out, name, edit):
    folder = os.path.join(out, name)
    shutil.copytree(good, folder)
    edit(folder)


def latest(folder):
    return os.path.join(folder, open(os.path.join(folder, "latest")).read().strip())


def main():
    good, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)

    def set_latest(text):
        return lambda f: open(os.path.join(f, "latest"), "w").write(text)

    variant(good, out, "latest-negative-step", set_latest("step--1\n"))
    variant(good, out, "latest-huge-step", set_latest("step-9223372036854775807\n"))
    variant(good, out, "latest-missing-folder", set_latest("step-7\n"))

    def read_safetensors(path):
        """(header dict, data bytes) of a safetensors file: an 8-byte little-endian header size, JSON, data."""
        raw = open(path, "rb").read()
        size = int.from_bytes(raw[:8], "little")
        return json.loads(raw[8:8 + size]), raw[8 + size:]

    def write_safetensors(path, header, data):
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        open(path, "wb").write(len(text).to_bytes(8, "little") + text + data)

    def file_of(name):
        return "model.safetensors" if "/" not in name and name != "step" else "training.safetensors"

    def edit_tensor(name, change):
        """change(array) -> array of the same byte size (its shape may differ) for tensor `name`."""
        def apply(folder):
            path = os.path.join(latest(folder), file_of(name))
            header, data = read_safetensors(path)
            begin, end = header[name]["data_offsets"]
            a = np.frombuffer(data[begin:end], dtype=np.float32).reshape(header[name]["shape"])
            b = np.array(change(a.copy()), dtype=np.float32)  # (ascontiguousarray would make a 0-D one 1-D)
            header[name]["shape"] = list(b.shape)
            write_safetensors(path, header, data[:begin] + b.tobytes() + data[end:])
        return apply

    variant(good, out, "wrong-shape", edit_tensor("fc1.weight", lambda a: a.reshape(-1, a.shape[0])))

    def resummed(name, change):
        """An edit whose manifest checksum is updated too: the values themselves must be checked."""
        def apply(folder):
            edit_tensor(name, change)(folder)
            header, data = read_safetensors(os.path.join(latest(folder), file_of(name)))
            begin, end = header[name]["data_offsets"]
            h = 1469598103934665603
            for b in data[begin:end]:
                h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
            path = os.path.join(latest(folder), "manifest.json")
            m = json.load(open(path))
            for t in m["tensors"]:
                if t["name"] == name:
                    t["fnv1a64"] = f"{h:016x}"
            json.dump(m, open(path, "w"))
        return apply

    nan_at_3 = lambda a: np.where(np.arange(a.size) == 3, np.nan, a).astype(a.dtype)  # noqa: E731
    variant(good, out, "nan-weight-resummed", resummed("fc1.bias", nan_at_3))
    variant(good, out, "negative-second-moment-resummed", resummed("fc1.bias/adam_v", lambda a: a - 1.0))
    variant(good, out, "step-counter-resummed", resummed("step", lambda a: a + 5))
    variant(good, out, "nan-weight", edit_tensor("fc1.bias", nan_at_3))
    variant(good, out, "negative-second-moment", edit_tensor("fc1.bias/adam_v", lambda a: a - 1.0))

    def flip_byte(folder):
        path = os.path.join(latest(folder), "model.safetensors")
        header, data = read_safetensors(path)
        begin, end = header["fc2.weight"]["data_offsets"]
        data = bytearray(data)
        data[end - 5] ^= 0x10
        write_safetensors(path, header, bytes(data))
    variant(good, out, "flipped-byte", flip_byte)

    def header_past_the_end(folder):
        path = os.path.join(latest(folder), "training.safetensors")
        raw = open(path, "rb").read()
        open(path, "wb").write((1 << 40).to_bytes(8, "little") + raw[8:])
    variant(good, out, "header-size-past-the-end", header_past_the_end)

    def truncated(folder):
        path = os.path.join(latest(folder), "model.safetensors")
        raw = open(path, "rb").read()
        open(path, "wb").write(raw[:-100])
    variant(good, out, "truncated-safetensors", truncated)

    def overlapping(folder):
        path = os.path.join(latest(folder), "model.safetensors")
        header, data = read_safetensors(path)
        header["fc2.bias"]["data_offsets"] = header["fc1.bias"]["data_offsets"]
        write_safetensors(path, header, data)
    variant(good, out, "overlapping-tensors", overlapping)

    def renamed(folder):
        old = latest(folder)
        os.rename(old, os.path.join(folder, "step-3"))
        open(os.path.join(folder, "latest"), "w").write("step-3\n")
    variant(good, out, "renamed-step", renamed)

    def directory(folder):
        path = os.path.join(latest(folder), "model.safetensors")
        os.remove(path)
        os.makedirs(path)
    variant(good, out, "tensors-are-a-folder", directory)

    def old_format(folder):
        path = os.path.join(latest(folder), "manifest.json")
        m = json.load(open(path))
        json.dump({"step": m["step"], "tensors": [t["name"] for t in m["tensors"]]}, open(path, "w"))
    variant(good, out, "format-1-manifest", old_format)

    def manifest_entry(entry):
        def apply(folder):
            path = os.path.join(latest(folder), "manifest.json")
            m = json.load(open(path))
            m["tensors"].append(entry(m["tensors"][0]))
            json.dump(m, open(path, "w"))
        return apply
    variant(good, out, "empty-name", manifest_entry(lambda first: dict(first, name="")))
    variant(good, out, "unknown-name", manifest_entry(lambda first: dict(first, name="fc9.weight")))
    variant(good, out, "repeated-name", manifest_entry(lambda first: dict(first)))


def format_2(good, out):
    """The good checkpoint in format 2 (a .npy file per tensor, as tec wrote them before safetensors): still
    read. OUT/format-2/ is a checkpoint folder."""
    folder = os.path.join(out, "format-2")
    shutil.copytree(good, folder)
    step = latest(folder)
    manifest = json.load(open(os.path.join(step, "manifest.json")))
    tensors = {}
    for name in ("model.safetensors", "training.safetensors"):
        raw = open(os.path.join(step, name), "rb").read()
        size = int.from_bytes(raw[:8], "little")
        header, data = json.loads(raw[8:8 + size]), raw[8 + size:]
        for key, entry in header.items():
            if key != "__metadata__":
                begin, end = entry["data_offsets"]
                tensors[key] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(entry["shape"])
        os.remove(os.path.join(step, name))
    for t in manifest["tensors"]:
        t["file"] = t["name"].replace("/", "_").replace(":", "_") + ".npy"
        np.save(os.path.join(step, t["file"]), tensors[t["name"]])
    manifest["format"] = 2
    json.dump(manifest, open(os.path.join(step, "manifest.json"), "w"))


def format_2_wider_floats(ok, out):
    """OUT/format-2-f16: the format-2 checkpoint with one tensor's .npy in float16, whose manifest says f32."""
    folder = os.path.join(out, "format-2-f16")
    shutil.copytree(os.path.join(ok, "format-2"), folder)
    step = latest(folder)
    first = json.load(open(os.path.join(step, "manifest.json")))["tensors"][0]["file"]
    np.save(os.path.join(step, first), np.load(os.path.join(step, first)).astype(np.float16))


if __name__ == "__main__":
    main()
    if len(sys.argv) > 3:
        format_2(sys.argv[1], sys.argv[3])
        format_2_wider_floats(sys.argv[3], sys.argv[2])
