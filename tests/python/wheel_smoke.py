"""wheel_test.sh's checks, run in a fresh venv holding the wheel and numpy alone (the dev packages' libraries
hidden): the `tec` command and the package compile, run and train the test MLP exactly as the dev build did,
OpenBLAS and oneDNN come from the wheel, and every library the process maps is the venv's, the Python
installation's or one of the manylinux set."""
import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np

work, models = sys.argv[1], sys.argv[2]
mlp = os.path.join(models, "mlp.onnx")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def tec_cli(*args):
    run = subprocess.run(["tec", *args], capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"FAIL `tec {' '.join(args)}` exited {run.returncode}:\n{run.stdout}{run.stderr}")
    return run.stdout


# What the interpreter maps before tec comes in (its own stdlib modules' libraries: zlib, bz2, ffi, ...).
def mapped_libraries():
    return {line.split()[-1] for line in open("/proc/self/maps") if ".so" in line.split()[-1]}


import bz2, ctypes, lzma, shutil, tempfile, zlib  # noqa: E401,F401,E402  (the stdlib tec's imports pull in)
baseline = mapped_libraries()
import tec  # noqa: E402  (after the helpers: the import is what is under test)

check(tec_cli("--version").split()[:2] == ["tec", tec.__version__], f"`tec --version` says {tec.__version__}, as tec.__version__")
tec_cli(mlp, "--target", "cpu", "--train", "-o", f"{work}/wheel.tecplan")
same_plan = open(f"{work}/wheel.tecplan", "rb").read() == open(f"{work}/dev.tecplan", "rb").read()
check(same_plan, "`tec mlp.onnx --train` writes the dev build's plan, byte for byte")
tec_cli("run", f"{work}/wheel.tecplan", "--input", f"x={work}/batch.npy", "--iterations", "1", "--output-dir",
        f"{work}/wheel-out")
expected = np.load(f"{work}/dev-out/y.npy")
check(np.array_equal(np.load(f"{work}/wheel-out/y.npy"), expected), "`tec run` outputs equal the dev build's")
tec_cli("train", f"{work}/wheel.tecplan", "--input", f"x={work}/x.npy", "--target", f"y={work}/y.npy", "--steps", "3",
        "--report", f"{work}/wheel-report.json")
dev_losses = json.load(open(f"{work}/dev-report.json"))["loss"]
check(json.load(open(f"{work}/wheel-report.json"))["loss"] == dev_losses, "`tec train` losses equal the dev build's")

check("/tec/cpu/libopenblas.so.0" in tec_cli("doctor"), "the `tec` command loads the wheel's OpenBLAS (tec doctor)")

x, y = np.load(f"{work}/x.npy"), np.load(f"{work}/y.npy")
plan = tec.compile(mlp, targets=["cpu"], train=tec.TrainOptions())
with warnings.catch_warnings():  # the plan's untrained weights are the point here
    warnings.simplefilter("ignore")
    untrained = tec.Session(plan, device="cpu").run({"x": x[:64]})["y"]
check(np.array_equal(untrained, expected), "tec.Session outputs equal the dev build's")
trainer = tec.Trainer(plan, device="cpu")
losses = [trainer.step({"x": x[i * 64:(i + 1) * 64]}, {"y": y[i * 64:(i + 1) * 64]}) for i in range(3)]
check([np.float32(v) for v in losses] == [np.float32(v) for v in dev_losses], "tec.Trainer losses equal the dev build's")
doctor = str(tec.doctor())
for library in ("libopenblas.so.0", "libdnnl.so"):
    check(f"/tec/cpu/{library}" in doctor, f"{library} is the wheel's (tec.doctor: "
          f"{re.findall(r'[^ (]*' + re.escape(library) + r'[^ ;)]*', doctor)})")

# Besides the manylinux set, the CUDA libraries stay outside the wheel by design (the plugin finds them).
allowed = re.compile(r"^(libc|libm|libdl|librt|libpthread|libutil|libnsl|libresolv|libstdc\+\+|libgcc_s|"
                     r"ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libcudnn\w*|libnvrtc\w*|libnccl)[.-]")
prefixes = tuple(os.path.realpath(p) + "/" for p in {sys.prefix, sys.base_prefix})
mapped = mapped_libraries()
foreign = sorted(f for f in mapped - baseline if not os.path.realpath(f).startswith(prefixes) and
                 not allowed.match(os.path.basename(f)))
check(not foreign, f"every library tec brought in is the wheel's, the venv's or manylinux's or CUDA's "
      f"({len(mapped - baseline)} of {len(mapped)} mapped" + (f"; not: {foreign}" if foreign else "") + ")")
print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
