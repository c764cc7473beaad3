#!/usr/bin/env bash
# The wheel where none of tec's build dependencies are: `./dev wheel` (incremental after the first), then, in a
# mount namespace where every library the dev build takes from Debian's packages is hidden (LLVM, MLIR, ONNX,
# protobuf, OpenBLAS, oneDNN and what they pull in: /dev/null bound over each file), a fresh venv installs it
# and wheel_smoke.py compiles, runs and trains the test MLP with the `tec` command and the package, against the
# dev build's results, and checks that every library the process maps comes from the wheel, the venv or the
# manylinux set. Exit 77 (skipped) only when this machine gives no mount namespace to hide the libraries in.
# Usage: wheel_test.sh SOURCE_DIR DEV_BUILD_DIR MODELS_DIR
set -euo pipefail
source_dir=$1 build=$2 models=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$source_dir" && ./dev wheel) > "$work/wheel.log" 2>&1 || { cat "$work/wheel.log"; exit 1; }
wheel=$(ls "$source_dir"/dist/tec-*.whl)
echo "wheel: $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
case $(basename "$wheel") in
  *manylinux_*) ;;
  *) echo "FAIL: not a manylinux wheel: $wheel"; exit 1 ;;
esac

# What the dev build computes, for the wheel to reproduce: inference and three training steps of the MLP.
python=$source_dir/.venv/bin/python
"$python" - "$work" <<'EOF'
import sys, numpy as np
rng = np.random.default_rng(3)
np.save(f"{sys.argv[1]}/x.npy", rng.standard_normal((3 * 64, 256), dtype=np.float32))
np.save(f"{sys.argv[1]}/y.npy", rng.standard_normal((3 * 64, 16), dtype=np.float32))
np.save(f"{sys.argv[1]}/batch.npy", np.load(f"{sys.argv[1]}/x.npy")[:64])
EOF
"$build/bin/tec" "$models/mlp.onnx" --target cpu --train -o "$work/dev.tecplan" > /dev/null
"$build/bin/tec" run "$work/dev.tecplan" --input "x=$work/batch.npy" --iterations 1 --output-dir "$work/dev-out" > /dev/null
"$build/bin/tec" train "$work/dev.tecplan" --input "x=$work/x.npy" --target "y=$work/y.npy" --steps 3 \
  --report "$work/dev-report.json" > /dev/null

# Hidden: each library the dev build's binaries link or load, less the manylinux set and what the base system
# needs of them: Python's own (its zlib, ssl, ctypes, which pip uses) and the shell's and mount's.
allowed='^(libc|libm|libdl|librt|libpthread|libutil|libnsl|libresolv|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so'
dlopened=$(ls /usr/lib/x86_64-linux-gnu/libdnnl.so.* /usr/lib/x86_64-linux-gnu/openblas-*/libopenblas.so.0 2>/dev/null || true)
python3 -c "import ssl, zlib, lzma, bz2, ctypes, sqlite3, hashlib; print(open('/proc/self/maps').read())" |
  awk '$6 ~ /\.so/ {print $6}' > "$work/base-libraries"
for tool in bash mount; do ldd "$(command -v $tool)" | awk '$3 ~ /^\// {print $3}' >> "$work/base-libraries"; done
xargs -r realpath < "$work/base-libraries" | sort -u > "$work/base-system"
{ for f in "$build"/python/tec/_tec*.so "$build/bin/tec" $dlopened; do
    echo "$f"
    ldd "$f" | awk '$3 ~ /^\// {print $3}'
  done; } | xargs -r realpath | sort -u |
  while read -r lib; do
    basename "$lib" | grep -Eq "$allowed" && continue
    grep -qxF "$lib" "$work/base-system" && continue
    echo "$lib"
  done > "$work/hidden"
case $(grep -c . "$work/hidden") in
  0) echo "FAIL: found no library to hide (ldd of the dev build)"; exit 1 ;;
esac
grep -q libLLVM "$work/hidden" && grep -q libprotobuf "$work/hidden" && grep -q libopenblas "$work/hidden" ||
  { echo "FAIL: LLVM, protobuf or OpenBLAS is not among the hidden libraries:"; cat "$work/hidden"; exit 1; }

cat > "$work/inside.sh" <<'EOF'
set -euo pipefail
work=$1 wheel=$2 models=$3 hide=$4
if [ "$hide" = 1 ]; then
  while read -r lib; do mount --bind /dev/null "$lib"; done < "$work/hidden"
  echo "hidden: $(wc -l < "$work/hidden") libraries ($(xargs -n1 basename < "$work/hidden" | tr '\n' ' '))"
fi
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$wheel"
PATH="$work/venv/bin:$PATH" "$work/venv/bin/python" "$(dirname "$0")/wheel_smoke.py" "$work" "$models"
EOF
cp "$(dirname "$0")/wheel_smoke.py" "$work/"
if unshare -m true 2>/dev/null; then
  unshare -m bash "$work/inside.sh" "$work" "$wheel" "$models" 1
elif unshare -rm true 2>/dev/null; then
  unshare -rm bash "$work/inside.sh" "$work" "$wheel" "$models" 1
else
  bash "$work/inside.sh" "$work" "$wheel" "$models" 0
  echo "SKIPPED: no mount namespace here to hide the dev packages' libraries in (checked with them present)"
  exit 77
fi
