#!/bin/sh
# The CPU kernels' per-element math (support/Activations.h) uses fmaf: one instruction in the AVX2 and
# AVX-512 clones of a loop (TEC_CPU_CLONES), a libm call per element anywhere built for the baseline ISA. A
# lambda that a cloned loop calls but does not inline is built for the baseline: so every fmaf call must sit
# in a baseline clone (".default"), and nowhere else. Usage: clones_inline_math.sh LIBRARY...
[ "$(uname -m)" = x86_64 ] || { echo "not x86-64: no clones"; exit 77; }
status=0
for lib in "$@"; do
  outside=$(objdump -dr --no-show-raw-insn "$lib" |
    awk '/^[0-9a-f]+ </ {fn = $2} /R_X86_64_[A-Z0-9_]+[ \t]+fmaf/ && fn !~ /\.default>:$/ {print fn}' | sort -u)
  if [ -n "$outside" ]; then
    echo "$lib: fmaf called outside a baseline clone (a lambda a cloned loop calls needs TEC_PER_ELEMENT):"
    echo "$outside" | c++filt
    status=1
  fi
done
exit $status
