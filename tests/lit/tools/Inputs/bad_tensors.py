"""Writes malformed .npy and .pb tensor files, one per class of bad input tec must refuse (exit 2).

Usage: bad_tensors.py OUT_DIR   (each file's name says what is wrong with it)
"""
import os
import struct
import sys

from onnx import TensorProto, helper


def npy(path, header, data=b"", major=1):
    h = header.encode()
    h += b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
    size = struct.pack("<H", len(h)) if major == 1 else struct.pack("<I", len(h))
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + bytes([major, 0]) + size + h + data)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    zeros = b"\0" * (64 * 256 * 4)
    good = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }"
    npy(f"{out}/shape-not-integers.npy", good % "('a', 256)")
    npy(f"{out}/shape-23-digits.npy", good % "(12345678901234567890123, 256)")
    npy(f"{out}/shape-nested.npy", good % "((64, 256))")
    npy(f"{out}/shape-float.npy", good % "(64.5, 256)", zeros)
    npy(f"{out}/shape-overflows.npy", good % "(576460752303423488, 64)")
    npy(f"{out}/fortran-order-1.npy", "{'descr': '<f4', 'fortran_order': 1, 'shape': (64, 256), }", zeros)
    npy(f"{out}/version-9.npy", good % "(64, 256)", zeros, major=9)
    npy(f"{out}/unknown-key.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (64, 256), 'x': 1}", zeros)
    npy(f"{out}/truncated-data.npy", good % "(64, 256)", zeros[:100])
    npy(f"{out}/header-past-end.npy", good % "(64, 256)")
    with open(f"{out}/header-past-end.npy", "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<H", 60000))
    os.makedirs(f"{out}/a-directory.npy", exist_ok=True)

    def pb(name, tensor):
        with open(f"{out}/{name}.pb", "wb") as f:
            f.write(tensor.SerializeToString())

    t = TensorProto(data_type=TensorProto.FLOAT, dims=[-64, 256])
    pb("negative-dim", t)
    pb("huge-dims", TensorProto(data_type=TensorProto.FLOAT, dims=[1 << 40, 1 << 10]))
    pb("overflowing-dims", TensorProto(data_type=TensorProto.FLOAT, dims=[1 << 62, 1 << 62]))
    both = helper.make_tensor("x", TensorProto.FLOAT, [2], [1.0, 2.0])
    both.raw_data = b"\0" * 8
    pb("raw-and-float-data", both)
    pb("short-raw-data", TensorProto(data_type=TensorProto.FLOAT, dims=[64, 256], raw_data=b"\0" * 12))
    with open(f"{out}/not-a-tensor.pb", "wb") as f:
        f.write(b"\xff\xff\xff\xff garbage")


if __name__ == "__main__":
    main()
