import os

import lit.formats

config.name = "tec"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tec_obj_root, "tests", "lit")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in", "CMakeLists.txt"]
config.environment["PATH"] = os.pathsep.join(
    [config.tec_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%models", config.models_dir))

# Tests of the CPU fallback need a machine where no GPU runs plans (tec doctor says which).
import subprocess
try:
    doctor = subprocess.run([os.path.join(config.tec_tools_dir, "tec"), "doctor"], capture_output=True, text=True,
                            timeout=60).stdout
except (OSError, subprocess.TimeoutExpired):
    doctor = ""
if "GPU          none usable" in doctor:
    config.available_features.add("no-cuda-device")
