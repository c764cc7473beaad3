"""The README's Python block, run as it stands in a folder holding the test MLP as model.onnx: training,
checkpoints and inference after training. Its inference must use the trained weights: checked against ONNX
Runtime on the model it exported with them (and against the untrained model, which must differ)."""
import os
import re
import shutil

import numpy as np
import onnxruntime as ort

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
MLP = os.path.join(os.environ["TEC_MODELS_DIR"], "mlp.onnx")  # x [64, 256] -> y [64, 16]


def python_block():
    text = open(README).read()
    section = text[text.index("\n## Python\n"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_python_block_runs_and_infers_with_the_trained_weights(tmp_path, monkeypatch):
    shutil.copyfile(MLP, tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(python_block(), "README.md", "exec"), scope)
    x = scope["x"]
    trained = ort.InferenceSession("trained.onnx").run(None, {"x": x})[0]
    untrained = ort.InferenceSession("model.onnx").run(None, {"x": x})[0]
    assert np.abs(trained - untrained).max() > 1e-2  # training moved the weights
    for name, got in [("trainer.predict", scope["outputs"]["y"]), ("Session(checkpoint=)", scope["session"].run({"x": x})["y"])]:
        np.testing.assert_allclose(got, trained, rtol=1e-5, atol=1e-5, err_msg=name)
    assert scope["session"].weights.startswith("checkpoint ckpt")
