#!/usr/bin/env python3
"""The include graph against tec's layers (README, Architecture): each folder may include only the folders
below it, so that a leak (a pass reaching into the runtime, the CLI past api/) fails CI rather than growing.
Also: support/, kernels/ and runtime/ include no LLVM or MLIR header (the runtime runs plans without the
compiler), and the API's headers (MLIR_FREE) bring in no MLIR header through any chain. Prints every offending include, file:line, and exits 1; `--list` prints the edges found, `--self-test` checks the checker on a planted tree."""
import os
import re
import sys

# What each layer may include besides itself (direct includes of "folder/..."); tests/ and bench/ may
# include anything.
ALLOWED = {
    "support": set(),
    "kernels": {"support"},
    "runtime": {"kernels", "support"},
    "ir": {"support"},
    "frontend": {"ir", "support"},
    "passes": {"ir", "support"},
    "codegen": {"passes", "ir", "runtime", "support"},
    "api": {"codegen", "runtime", "passes", "frontend", "ir", "support"},
    "tools": {"api", "support"},
    "python": {"api", "support"},
}
NO_COMPILER = {"support", "kernels", "runtime"}
# Headers that must not bring MLIR in, through any chain of tec's includes: the API without the compiler's
# types (the Python package and the tools compile against these) and the options they hold.
MLIR_FREE = ["api/Compile.h", "api/Runtime.h", "passes/PassOptions.h", "frontend/ImportOptions.h"]
QUOTED = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".h", ".cpp", ".cu", ".cuh", ".inc", ".td")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_.-]+)/')


def violations(root):
    found, edges = [], set()
    for layer, allowed in ALLOWED.items():
        for folder, _, files in os.walk(os.path.join(root, layer)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        match = INCLUDE.match(line)
                        if not match:
                            continue
                        target = match.group(1)
                        edges.add((layer, target))
                        if target in ("llvm", "mlir") and layer in NO_COMPILER:
                            found.append(f"{os.path.relpath(path, root)}:{number}: {layer}/ includes {target}/ "
                                         "(it must run without the compiler)")
                        elif target in ALLOWED and target != layer and target not in allowed:
                            found.append(f"{os.path.relpath(path, root)}:{number}: {layer}/ includes {target}/ "
                                         f"(allowed: {', '.join(sorted(allowed)) or 'nothing of tec'})")
    for header in MLIR_FREE:
        chain = mlir_chain(root, header, [])
        if chain:
            found.append(f"{header}: brings MLIR in: {' -> '.join(chain)}")
    return found, edges


def mlir_chain(root, header, seen):
    """The include chain from `header` to an MLIR header (tec's own headers followed; generated ones, not in
    the tree, are not), or None."""
    path = os.path.join(root, header)
    if header in seen or not os.path.exists(path):
        return None
    seen.append(header)
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            match = QUOTED.match(line)
            if not match:
                continue
            target = match.group(1)
            if target.startswith("mlir/"):
                return [header, target]
            chain = mlir_chain(root, target, seen)
            if chain:
                return [header] + chain
    return None


def self_test():
    """The checker on a planted tree: a pass reaching into the runtime, the runtime into MLIR, a tool past
    api/ must be found; the allowed edges must not."""
    import tempfile
    planted = {"passes/Leak.cpp": '#include "runtime/Session.h"\n#include "ir/TecOps.h"\n',
               "runtime/cuda/Leak.cpp": '#include "mlir/IR/Value.h"\n#include "support/Status.h"\n',
               "tools/tec/Leak.h": '  #  include "frontend/Importer.h"\n#include "api/Runtime.h"\n',
               "api/Compile.h": '#include "passes/PassOptions.h"\n',
               "passes/PassOptions.h": '#include "ir/TecOps.h"\n',
               "ir/TecOps.h": '#include "mlir/IR/OpDefinition.h"\n'}
    with tempfile.TemporaryDirectory() as root:
        for path, text in planted.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        found, _ = violations(root)
    expected = ["passes/Leak.cpp:1:", "runtime/cuda/Leak.cpp:1:", "tools/tec/Leak.h:1:", "api/Compile.h:",
                "passes/PassOptions.h:"]
    if sorted(v.split(" ")[0] for v in found) != sorted(expected):
        print("self-test failed: found", found)
        return 1
    return 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    args = [a for a in sys.argv[1:] if a != "--list"]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), "..", ".."))
    found, edges = violations(root)
    if "--list" in sys.argv:
        for layer, target in sorted(edges):
            print(f"{layer} -> {target}")
    for v in found:
        print(v)
    print(f"include layers: {len(found)} offending include(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
