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

    def edit_npy(name, change):
        def apply(folder):
            path = os.path.join(latest(folder), name)
            a = np.load(path)
            np.save(path, change(a))
        return apply

    variant(good, out, "wrong-shape", edit_npy("fc1.weight.npy", lambda a: a.reshape(-1, a.shape[0])))

    def resummed(name, change):
        """An edit whose manifest checksum is updated too: the values themselves must be checked."""
        def apply(folder):
            edit_npy(name, change)(folder)
            data = np.load(os.path.join(latest(folder), name)).tobytes()
            h = 1469598103934665603
            for b in data:
                h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
            path = os.path.join(latest(folder), "manifest.json")
            m = json.load(open(path))
            for t in m["tensors"]:
                if t["file"] == name:
                    t["fnv1a64"] = f"{h:016x}"
            json.dump(m, open(path, "w"))
        return apply

    variant(good, out, "nan-weight-resummed",
            resummed("fc1.bias.npy", lambda a: np.where(np.arange(a.size) == 3, np.nan, a).astype(a.dtype)))
    variant(good, out, "negative-second-moment-resummed", resummed("fc1.bias_adam_v.npy", lambda a: a - 1.0))
    variant(good, out, "step-counter-resummed", resummed("step.npy", lambda a: a + 5))
    variant(good, out, "nan-weight", edit_npy("fc1.bias.npy", lambda a: np.where(np.arange(a.size) == 3, np.nan, a).astype(a.dtype)))
    variant(good, out, "negative-second-moment", edit_npy("fc1.bias_adam_v.npy", lambda a: a - 1.0))

    def flip_byte(folder):
        path = os.path.join(latest(folder), "fc2.weight.npy")
        data = bytearray(open(path, "rb").read())
        data[-5] ^= 0x10
        open(path, "wb").write(bytes(data))
    variant(good, out, "flipped-byte", flip_byte)

    def renamed(folder):
        old = latest(folder)
        os.rename(old, os.path.join(folder, "step-3"))
        open(os.path.join(folder, "latest"), "w").write("step-3\n")
    variant(good, out, "renamed-step", renamed)

    def directory(folder):
        path = os.path.join(latest(folder), "fc3.bias.npy")
        os.remove(path)
        os.makedirs(path)
    variant(good, out, "tensor-is-a-folder", directory)

    def old_format(folder):
        path = os.path.join(latest(folder), "manifest.json")
        m = json.load(open(path))
        json.dump({"step": m["step"], "tensors": [t["name"] for t in m["tensors"]]}, open(path, "w"))
    variant(good, out, "format-1-manifest", old_format)


if __name__ == "__main__":
    main()
