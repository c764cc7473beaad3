"""The tec Python package against the CLI: the same plan and data give the same bits (inference, three
training steps, a resumed run); errors raise the right tec.Error subclass with the CLI's message; arrays
from NumPy and PyTorch (DLPack) alike; objects outliving one another."""
import gc
import json
import math
import os
import subprocess
import tempfile
import warnings

import numpy as np
import onnx
import pytest

import tec

TEC = os.environ["TEC_BINARY"]
MODELS = os.environ["TEC_MODELS_DIR"]
MLP = os.path.join(MODELS, "mlp.onnx")  # x [64, 256] -> y [64, 16]


def cli(*args):
    return subprocess.run([TEC, *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64 * 4, 256)).astype(np.float32)
    y = rng.standard_normal((64 * 4, 16)).astype(np.float32)
    np.save(folder / "x.npy", x)
    np.save(folder / "y.npy", y)
    return folder, x, y


def test_inference_equals_the_cli_bit_for_bit(tmp_path, data):
    folder, x, _ = data
    plan = tec.compile(MLP, targets=["cpu"], output=str(tmp_path / "py.tecplan"))
    cli(MLP, "--target", "cpu", "-o", str(tmp_path / "cli.tecplan"))
    batch = x[:64]
    np.save(tmp_path / "batch.npy", batch)
    cli("run", str(tmp_path / "cli.tecplan"), "--input", f"x={tmp_path / 'batch.npy'}", "--iterations", "1",
        "--output-dir", str(tmp_path / "out"))
    expected = np.load(tmp_path / "out" / "y.npy")
    got = tec.Session(plan, device="cpu").run({"x": batch})["y"]
    assert got.dtype == np.float32 and got.shape == (64, 16)
    np.testing.assert_array_equal(got, expected)
    # The plans themselves: the same compile, the same file (deterministic serialization), the same summary.
    assert (tmp_path / "py.tecplan").read_bytes() == (tmp_path / "cli.tecplan").read_bytes()
    summary = cli(MLP, "--target", "cpu", "-o", str(tmp_path / "py.tecplan"))
    assert plan.compile_summary == summary and "layer" in summary


def train_options():
    return tec.TrainOptions(loss="mse", optimizer="adamw", lr=1e-3)


def read_safetensors(path):
    """Every tensor of a safetensors file (an 8-byte little-endian header size, a JSON header, the data), read
    here as the format describes it: independent of tec's reader."""
    raw = open(path, "rb").read()
    size = int.from_bytes(raw[:8], "little")
    header, data = json.loads(raw[8:8 + size]), raw[8 + size:]
    types = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "F16": np.float16}
    return {name: np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], dtype=types[e["dtype"]])
            .reshape(e["shape"]) for name, e in header.items() if name != "__metadata__"}


def checkpoint_tensors(folder):
    with open(os.path.join(folder, "latest")) as f:
        latest = os.path.join(folder, f.read().strip())
    tensors = {}
    for name in ("model.safetensors", "training.safetensors"):
        tensors.update(read_safetensors(os.path.join(latest, name)))
    return tensors


def test_three_training_steps_and_a_resume_equal_the_cli(tmp_path, data):
    folder, x, y = data
    plan_path = str(tmp_path / "train.tecplan")
    cli(MLP, "--target", "cpu", "--train", "--loss", "mse", "--optimizer", "adamw", "--lr", "1e-3", "-o", plan_path)
    report = tmp_path / "report.json"
    cli("train", plan_path, "--input", f"x={folder / 'x.npy'}", "--target", f"y={folder / 'y.npy'}", "--steps", "5",
        "--checkpoint-every", "3", "--checkpoint-dir", str(tmp_path / "cli_ckpt"), "--report", str(report))
    cli_losses = json.loads(report.read_text())["loss"]

    trainer = tec.Trainer(tec.load(plan_path), device="cpu")
    losses = [trainer.step({"x": x[i * 64:(i + 1) * 64]}, {"y": y[i * 64:(i + 1) * 64]}) for i in range(3)]
    assert [np.float32(v) for v in cli_losses[:3]] == [np.float32(v) for v in losses]
    trainer.save(str(tmp_path / "py_ckpt"))

    resumed = tec.Trainer(plan_path, device="cpu")
    assert resumed.resume(str(tmp_path / "py_ckpt")) == 3
    for i in (3, 0):  # the CLI's batches for steps 4 and 5 (4 batches: step 5 wraps to the first)
        losses.append(resumed.step({"x": x[i * 64:(i + 1) * 64]}, {"y": y[i * 64:(i + 1) * 64]}))
    assert [np.float32(v) for v in cli_losses] == [np.float32(v) for v in losses]
    resumed.save(str(tmp_path / "py_ckpt"))
    ours, theirs = checkpoint_tensors(tmp_path / "py_ckpt"), checkpoint_tensors(tmp_path / "cli_ckpt")
    assert ours.keys() == theirs.keys() and ours
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


def test_inference_after_training_runs_the_trained_weights(tmp_path, data):
    """trainer.predict, trainer.session(), Session(checkpoint=) and `tec run --checkpoint` all run the
    trained weights: equal to ONNX Runtime on the exported trained model, and to one another bit for bit."""
    ort = pytest.importorskip("onnxruntime")
    _, x, y = data
    plan_path = str(tmp_path / "train.tecplan")
    plan = tec.compile(MLP, targets=["cpu"], train=train_options(), output=plan_path)
    trainer = tec.Trainer(plan, device="cpu")
    for i in range(3):
        trainer.step({"x": x[i * 64:(i + 1) * 64]}, {"y": y[i * 64:(i + 1) * 64]})
    trainer.save(str(tmp_path / "ckpt"))
    trainer.export(str(tmp_path / "trained.onnx"))
    batch = x[64:128]
    want = ort.InferenceSession(str(tmp_path / "trained.onnx")).run(None, {"x": batch})[0]
    predicted = trainer.predict({"x": batch})["y"]
    np.testing.assert_allclose(predicted, want, rtol=1e-5, atol=1e-5)
    from_session = trainer.session(device="cpu")
    assert from_session.weights == "trainer step 3"
    np.testing.assert_array_equal(from_session.run({"x": batch})["y"], predicted)
    from_checkpoint = tec.Session(plan, device="cpu", checkpoint=str(tmp_path / "ckpt"))
    assert from_checkpoint.weights == f"checkpoint {tmp_path / 'ckpt'}/step-3"
    np.testing.assert_array_equal(from_checkpoint.run({"x": batch})["y"], predicted)
    np.save(tmp_path / "batch.npy", batch)
    out = cli("run", plan_path, "--checkpoint", str(tmp_path / "ckpt"), "--input", f"x={tmp_path / 'batch.npy'}",
              "--iterations", "1", "--output-dir", str(tmp_path / "out"))
    assert f"weights: trained, from {tmp_path / 'ckpt'}/step-3" in out
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), predicted)
    # The plan's own weights are the untrained ones, and say so.
    with pytest.warns(UserWarning, match="untrained"):
        untrained = tec.Session(plan, device="cpu")
    assert untrained.weights == "plan"
    assert np.abs(untrained.run({"x": batch})["y"] - want).max() > 1e-3
    assert "weights: as compiled, untrained" in cli("run", plan_path, "--iterations", "1")
    # A later step: predict follows the trainer.
    trainer.step({"x": x[:64]}, {"y": y[:64]})
    assert not np.array_equal(trainer.predict({"x": batch})["y"], predicted)


def test_a_checkpoint_that_does_not_fit_is_refused(tmp_path, data):
    _, x, y = data
    with pytest.raises(tec.BadInputError, match="nothing: no checkpoint folder"):
        tec.Session(tec.compile(MLP, targets=["cpu"], train=train_options()), device="cpu",
                    checkpoint=str(tmp_path / "nothing"))
    with pytest.raises(tec.BadInputError, match="no train variant"):
        tec.Session(tec.compile(MLP, targets=["cpu"]), device="cpu", checkpoint=str(tmp_path / "nothing"))
    # A checkpoint of another training setup (SGD: no moments) does not fit an AdamW plan.
    sgd = tec.Trainer(tec.compile(MLP, targets=["cpu"], train=tec.TrainOptions(optimizer="sgd")), device="cpu")
    sgd.step({"x": x[:64]}, {"y": y[:64]})
    sgd.save(str(tmp_path / "sgd"))
    with pytest.raises(tec.BadInputError, match="does not fit"):
        tec.Session(tec.compile(MLP, targets=["cpu"], train=train_options()), device="cpu",
                    checkpoint=str(tmp_path / "sgd"))
    result = subprocess.run([TEC, "run", "--checkpoint", str(tmp_path / "nothing"),
                             str(tmp_path / "none.tecplan")], capture_output=True, text=True)
    assert result.returncode == 2 and "error:" in result.stderr


def test_arguments_are_strict_and_familiar(tmp_path, data):
    _, x, y = data
    plan = tec.compile(MLP, targets=["cpu"])
    for device in ("bogus", "gpu", "CUDA", "cpu:0"):
        with pytest.raises(tec.BadInputError, match=f"device '{device}': expected auto, cpu, cuda or cuda:0"):
            tec.Session(plan, device=device)
    with pytest.raises(tec.BadInputError, match="tec runs on the first GPU"):
        tec.Session(plan, device="cuda:1")
    for threads in (-1, 100000):
        with pytest.raises(tec.BadInputError, match=f"threads {threads}: expected 0"):
            tec.Session(plan, device="cpu", threads=threads)
    session = tec.Session(plan, device="cpu", threads=1)
    batch = x[:64]
    with pytest.raises(tec.BadInputError, match="input 'x': expected float32, got float64"):
        session.run({"x": batch.astype(np.float64)})
    cast = session.run({"x": batch.astype(np.float64)}, cast=True)["y"]
    np.testing.assert_array_equal(cast, session.run({"x": batch})["y"])
    with pytest.raises(tec.BadInputError, match=r"the plan's batch is 64, this one has 40 .*drop_last=True"):
        session.run({"x": batch[:40]})
    # ONNX Runtime's forms: run(output_names, feed) as a list; get_inputs()/get_outputs() as NodeArgs.
    (first,) = session.run(None, {"x": batch})
    np.testing.assert_array_equal(first, cast)
    assert [a.name for a in session.get_inputs()] == ["x"] and session.get_inputs()[0].shape == [64, 256]
    assert session.get_outputs()[0].type == "tensor(float)"
    with pytest.raises(tec.BadInputError, match="'z' not an output"):
        session.run(["z"], {"x": batch})
    # A training step's targets are named as the user names them, never with tec's internal prefix.
    trainer = tec.Trainer(tec.compile(MLP, targets=["cpu"], train=train_options()), device="cpu")
    with pytest.raises(tec.BadInputError) as wrong:
        trainer.step({"x": batch}, {"y": y[:64].astype(np.float64)})
    assert "target 'y': expected float32, got float64" in str(wrong.value) and "target:" not in str(wrong.value)


def test_a_non_finite_loss_stops_training_naming_the_step(tmp_path, data):
    folder, x, y = data
    exploding = tec.TrainOptions(optimizer="sgd", lr=1e30)  # the first update sends the loss to NaN
    plan = tec.compile(MLP, targets=["cpu"], train=exploding, output=str(tmp_path / "nan.tecplan"))
    trainer = tec.Trainer(plan, device="cpu")
    trainer.step({"x": x[:64]}, {"y": y[:64]})
    with pytest.raises(tec.NonFiniteLossError, match="step 2: the loss is nan") as stopped:
        trainer.step({"x": x[:64]}, {"y": y[:64]})
    assert stopped.value.step == 2 and math.isnan(stopped.value.loss)
    going = tec.Trainer(plan, device="cpu", stop_on_nonfinite=False)
    assert math.isnan([going.step({"x": x[:64]}, {"y": y[:64]}) for _ in range(2)][-1])
    args = [TEC, "train", str(tmp_path / "nan.tecplan"), "--input", f"x={folder / 'x.npy'}", "--target",
            f"y={folder / 'y.npy'}", "--steps", "4", "--checkpoint-every", "1", "--checkpoint-dir", str(tmp_path / "ck")]
    result = subprocess.run(args, capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert "step 2: the loss is nan; training stops" in result.stderr
    assert f"the last checkpoint is {tmp_path / 'ck'}/step-1" in result.stderr
    assert f"checkpoint {tmp_path / 'ck'}/step-1" in result.stdout
    assert sorted(os.listdir(tmp_path / "ck")) == [".tec-lock", "latest", "step-1"]  # nothing saved after the NaN
    assert subprocess.run(args[:-4] + ["--continue-on-nonfinite"], capture_output=True).returncode == 0


def test_fit_trains_over_a_loader_as_steps_do(tmp_path, data):
    _, x, y = data
    plan = tec.compile(MLP, targets=["cpu"], train=train_options())
    loader = [(x[i * 64:(i + 1) * 64], y[i * 64:(i + 1) * 64]) for i in range(4)]
    seen = []
    history = tec.Trainer(plan, device="cpu").fit(loader, epochs=2, checkpoint_dir=str(tmp_path / "ck"),
                                                  callbacks=[lambda t, epoch, logs: seen.append((epoch, logs))],
                                                  progress=False)
    by_hand = tec.Trainer(plan, device="cpu")
    losses = [[by_hand.step({"x": a}, {"y": b}) for a, b in loader] for _ in range(2)]
    assert history["loss"] == [sum(epoch) / 4 for epoch in losses]
    assert [(epoch, logs["steps"]) for epoch, logs in seen] == [(0, 4), (1, 8)]
    assert open(tmp_path / "ck" / "latest").read().strip() == "step-8"
    with pytest.raises(tec.BadInputError, match="fit: a batch must be"):
        tec.Trainer(plan, device="cpu").fit([x[:64]], progress=False)


def test_a_checkpoint_holds_the_params_in_safetensors_as_pytorch_loads_them(tmp_path, data):
    """model.safetensors holds exactly the trained params by name (what load_state_dict takes), equal to the
    exported model's initializers; the rest of the state is in training.safetensors."""
    _, x, y = data
    trainer = tec.Trainer(tec.compile(MLP, targets=["cpu"], train=train_options()), device="cpu")
    trainer.step({"x": x[:64]}, {"y": y[:64]})
    trainer.save(str(tmp_path / "ckpt"))
    trainer.export(str(tmp_path / "trained.onnx"))
    params = read_safetensors(tmp_path / "ckpt" / "step-1" / "model.safetensors")
    exported = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / "trained.onnx")).graph.initializer}
    assert params.keys() == exported.keys()
    for name in params:
        np.testing.assert_array_equal(params[name], exported[name], err_msg=name)
    training = read_safetensors(tmp_path / "ckpt" / "step-1" / "training.safetensors")
    assert "step" in training and "fc1.weight/adam_m" in training and not set(training) & set(params)


def test_a_torch_module_loads_a_checkpoint_strictly():
    torch = pytest.importorskip("torch")
    safetensors = pytest.importorskip("safetensors.torch")
    pytest.importorskip("onnxscript")  # from_torch's default exporter, dynamo, needs it
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    trainer = tec.Trainer(tec.from_torch(module, x, input_names=["x"], output_names=["y"], targets=["cpu"],
                                         train=train_options()), device="cpu")
    for _ in range(3):
        trainer.step({"x": x.numpy()}, {"y": np.ones((8, 4), np.float32)})
    with tempfile.TemporaryDirectory() as folder:
        trainer.save(folder)
        module.load_state_dict(safetensors.load_file(os.path.join(folder, "step-3", "model.safetensors")), strict=True)
    np.testing.assert_allclose(module(x).detach().numpy(), trainer.predict({"x": x.numpy()})["y"], rtol=1e-5, atol=1e-5)


def test_the_learning_rate_is_set_between_steps(tmp_path, data):
    """SGD moves a param by lr x its gradient: from the same state, twice the rate moves it twice as far, a
    zero rate not at all; the rate set is kept in checkpoints."""
    _, x, y = data
    plan = tec.compile(MLP, targets=["cpu"], train=tec.TrainOptions(optimizer="sgd", lr=0.01))
    trainer = tec.Trainer(plan, device="cpu")
    assert trainer.lr == np.float32(0.01)
    trainer.step({"x": x[:64]}, {"y": y[:64]})
    trainer.save(str(tmp_path / "start"))
    start = checkpoint_tensors(tmp_path / "start")["fc2.weight"]
    moved = {}
    for lr in (0.0, 0.02, 0.04):
        resumed = tec.Trainer(plan, device="cpu")
        resumed.resume(str(tmp_path / "start"))
        resumed.lr = lr
        resumed.step({"x": x[64:128]}, {"y": y[64:128]})
        resumed.save(str(tmp_path / f"lr{lr}"))
        moved[lr] = checkpoint_tensors(tmp_path / f"lr{lr}")["fc2.weight"] - start
    assert not moved[0.0].any()
    assert np.abs(moved[0.02]).max() > 1e-4  # it moved, far beyond the rounding below
    # Equal up to the rounding of p - lr g in float (an ulp of the weights, ~1e-8 here).
    np.testing.assert_allclose(moved[0.04], 2 * moved[0.02], rtol=1e-4, atol=5e-8)
    again = tec.Trainer(plan, device="cpu")
    again.resume(str(tmp_path / "lr0.04"))
    assert again.lr == np.float32(0.04)
    with pytest.raises(tec.BadInputError, match="expected a finite value >= 0"):
        again.lr = -1.0


def test_gradient_accumulation_updates_every_nth_step_as_the_cli_does(tmp_path, data):
    """TrainOptions(accumulate=2): the first step of a window leaves the weights as they were, the second
    updates them; losses and checkpoints equal `tec train` on the plan compiled with --accumulate 2 bit for bit.
    (Equality with the larger batch against a numpy reference: tests/conformance/train_reference.py.)"""
    folder, x, y = data
    plan = tec.compile(MLP, targets=["cpu"], train=tec.TrainOptions(accumulate=2), output=str(tmp_path / "a.tecplan"))
    cli(MLP, "--target", "cpu", "--train", "--accumulate", "2", "-o", str(tmp_path / "cli.tecplan"))
    assert (tmp_path / "a.tecplan").read_bytes() == (tmp_path / "cli.tecplan").read_bytes()
    trainer = tec.Trainer(plan, device="cpu")
    assert trainer.accumulate == 2
    with pytest.warns(UserWarning, match="untrained"):
        untrained = tec.Session(plan, device="cpu").run({"x": x[:64]})["y"]
    losses = [trainer.step({"x": x[:64]}, {"y": y[:64]})]
    np.testing.assert_array_equal(trainer.predict({"x": x[:64]})["y"], untrained)
    for i in (1, 2, 3):
        losses.append(trainer.step({"x": x[i * 64:(i + 1) * 64]}, {"y": y[i * 64:(i + 1) * 64]}))
    assert np.abs(trainer.predict({"x": x[:64]})["y"] - untrained).max() > 1e-4
    trainer.save(str(tmp_path / "py_ckpt"))
    report = tmp_path / "report.json"
    said = cli("train", str(tmp_path / "cli.tecplan"), "--input", f"x={folder / 'x.npy'}", "--target",
               f"y={folder / 'y.npy'}", "--steps", "3", "--checkpoint-dir", str(tmp_path / "cli_ckpt"))
    assert "an optimizer update every 2" in said and "the last 1 steps' gradients wait" in said
    cli("train", str(tmp_path / "cli.tecplan"), "--input", f"x={folder / 'x.npy'}", "--target", f"y={folder / 'y.npy'}",
        "--steps", "4", "--resume", str(tmp_path / "cli_ckpt"), "--checkpoint-dir", str(tmp_path / "cli_ckpt"),
        "--report", str(report))
    assert [np.float32(v) for v in json.loads(report.read_text())["loss"]] == [np.float32(v) for v in losses[3:]]
    ours, theirs = checkpoint_tensors(tmp_path / "py_ckpt"), checkpoint_tensors(tmp_path / "cli_ckpt")
    assert ours.keys() == theirs.keys() and any(name.endswith("/grad_sum") for name in ours)
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    with pytest.raises(ValueError, match="TrainOptions.accumulate: expected an integer, got 2.5"):
        tec.compile(MLP, targets=["cpu"], train=tec.TrainOptions(accumulate=2.5))
    with pytest.raises(tec.BadInputError, match="accumulate 0"):
        tec.compile(MLP, targets=["cpu"], train=tec.TrainOptions(accumulate=0))


def test_one_training_run_at_a_time_writes_into_a_checkpoint_folder(tmp_path, data):
    """A trainer that saved into a folder holds it (an flock): `tec train` into the same folder exits 2 naming
    this process, and writes nothing there; once the trainer is gone, the folder is free."""
    folder, x, y = data
    plan_path = str(tmp_path / "train.tecplan")
    cli(MLP, "--target", "cpu", "--train", "-o", plan_path)
    trainer = tec.Trainer(plan_path, device="cpu")
    trainer.step({"x": x[:64]}, {"y": y[:64]})
    trainer.save(str(tmp_path / "ckpt"))
    args = [TEC, "train", plan_path, "--input", f"x={folder / 'x.npy'}", "--target", f"y={folder / 'y.npy'}", "--steps",
            "2", "--checkpoint-dir", str(tmp_path / "ckpt")]
    second = subprocess.run(args, capture_output=True, text=True)
    assert second.returncode == 2, second.stderr
    assert f"another training run writes its checkpoints here (pid {os.getpid()}:" in second.stderr
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir() if not p.name.startswith(".")) == ["latest", "step-1"]
    del trainer
    gc.collect()
    subprocess.run(args, check=True, capture_output=True)
    assert (tmp_path / "ckpt" / "step-2").is_dir()


def test_export_writes_the_trained_weights(tmp_path, data):
    _, x, y = data
    trainer = tec.Trainer(tec.compile(MLP, targets=["cpu"], train=train_options()), device="cpu")
    trainer.step({"x": x[:64]}, {"y": y[:64]})
    trainer.export(str(tmp_path / "trained.onnx"))
    model = onnx.load(str(tmp_path / "trained.onnx"))
    before = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(MLP).graph.initializer}
    after = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    assert before.keys() == after.keys()
    assert any(not np.array_equal(before[k], after[k]) for k in before)  # one AdamW step moved the weights


def test_a_misspelled_option_raises_instead_of_being_ignored(tmp_path):
    # Python's own keywords: compile(), TrainOptions and from_torch's compile options.
    with pytest.raises(TypeError, match="fp8_fromat"):
        tec.compile(MLP, targets="cpu", fp8_fromat="e4m3")
    with pytest.raises(TypeError, match="lrr"):
        tec.TrainOptions(lrr=0.1)
    # Underneath, the extension takes named options as dicts: a key no option takes is a TypeError there too
    # (a name the Python layer and the C++ options disagree on would otherwise be dropped silently).
    plan = str(tmp_path / "p.tecplan")
    with pytest.raises(TypeError, match="unknown option 'amax_algorithm'"):
        tec._tec.compile_to_file(MLP, False, plan, {}, ["cpu"], {"amax_algorithm": "max"}, {}, False, [])
    with pytest.raises(TypeError, match="unknown option 'learning_rate'"):
        tec._tec.compile_to_file(MLP, False, plan, {}, ["cpu"], {}, {"learning_rate": 0.1}, True, [])
    # Every key the Python layer sends is one the extension takes: a training compile with every option set.
    options = tec.TrainOptions(loss="l1", optimizer="sgd", lr=0.05, momentum=0.9, nesterov=True, clip_norm=1.0)
    assert tec.compile(MLP, targets="cpu", train=options, fp8_format="e4m3", amax_algo="most_recent").summary()
    # A choice option's value outside its choices: the CLI's message, naming the flag and the choices.
    with pytest.raises(tec.BadInputError, match="--schedule linear: expected one of constant, warmup, cosine"):
        tec.compile(MLP, targets="cpu", train=tec.TrainOptions(schedule="linear"))


def test_fp8_recipes_compile_as_the_cli_does(tmp_path):
    # Transformer Engine's recipes by name, per layer by node-name regex; the summary names each layer's.
    plan = tec.compile(MLP, targets="cpu", fp8="all", fp8_emulate=True, fp8_recipe="block;^fc3$=mxfp8",
                       fp8_block_scales="f32", output=str(tmp_path / "py.tecplan"))
    summary = cli(MLP, "--target", "cpu", "--fp8=all", "--fp8-emulate", "--fp8-recipe", "block;^fc3$=mxfp8",
                  "--fp8-block-scales", "f32", "-o", str(tmp_path / "cli.tecplan"))
    assert plan.compile_summary == summary.replace("cli.tecplan", "py.tecplan")
    assert "fc1+relu1 on cpu: fp8: E4M3 x E4M3, block scaling 1x128 x 128x128, f32 scales" in summary
    assert "fc3 on cpu: fp8: E4M3 x E4M3, MXFP8 1x32 x 1x32, E8M0 scales" in summary
    assert (tmp_path / "py.tecplan").read_bytes() == (tmp_path / "cli.tecplan").read_bytes()
    # tec calibrate's choice, read back from its JSON, as the CLI reads it.
    calibration = tmp_path / "calibration.json"
    calibration.write_text('{"target": "cpu", "fp8_recipe": "current;^fc1$=mxfp8"}')
    plan = tec.compile(MLP, targets="cpu", fp8="all", fp8_emulate=True, fp8_calibration=calibration,
                       output=str(tmp_path / "py.tecplan"))
    summary = cli(MLP, "--target", "cpu", "--fp8=all", "--fp8-emulate", "--fp8-calibration", str(calibration),
                  "-o", str(tmp_path / "cli.tecplan"))
    assert plan.compile_summary == summary.replace("cli.tecplan", "py.tecplan")
    assert "fc1+relu1 on cpu: fp8: E4M3 x E4M3, MXFP8 1x32 x 1x32, E8M0 scales" in summary
    assert "fc3 on cpu: fp8: E4M3 x E4M3, current scaling" in summary
    with pytest.raises(tec.BadInputError, match="--fp8-calibration .*nosuch.json: cannot read it"):
        tec.compile(MLP, targets="cpu", fp8_calibration=tmp_path / "nosuch.json")
    with pytest.raises(tec.BadInputError, match="--fp8-recipe 'fast': expected RECIPE"):
        tec.compile(MLP, targets="cpu", fp8_recipe="fast")
    with pytest.raises(tec.BadInputError, match="--fp8-block-scales f16: expected one of pow2, f32"):
        tec.compile(MLP, targets="cpu", fp8_recipe="block", fp8_block_scales="f16")


def test_models_as_bytes_and_protos_compile_alike(tmp_path):
    proto = onnx.load(MLP)
    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    outputs = [tec.Session(tec.compile(m, targets="cpu"), device="cpu").run({"x": x})["y"]
               for m in (MLP, proto, proto.SerializeToString())]
    np.testing.assert_array_equal(outputs[0], outputs[1])
    np.testing.assert_array_equal(outputs[0], outputs[2])


def test_a_large_splat_is_filled_at_run_time_as_onnxruntime_computes_it(tmp_path):
    """ConstantOfShape past 1 MiB (f32, int64, bool): the plan stores one element, not the tensor, and each run
    computes what ONNX Runtime does, in place writes over the filled tensor included (the second run)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    shape = numpy_helper.from_array(np.array([2048, 1024], np.int64), "shape")
    fills = [("f", np.array([0.5], np.float32)), ("i", np.array([3], np.int64)), ("b", np.array([True]))]
    nodes = [helper.make_node("ConstantOfShape", ["shape"], [name], value=numpy_helper.from_array(v, name + "_v"))
             for name, v in fills]
    nodes += [helper.make_node("Mul", ["x", "f"], ["xf"]),  # x [1, 1024] broadcasts: nothing folds
              helper.make_node("Where", ["b", "xf", "x"], ["y"]),
              helper.make_node("Add", ["n", "i"], ["z"])]
    graph = helper.make_graph(nodes, "splats", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024]),
                                                helper.make_tensor_value_info("n", TensorProto.INT64, [1, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2048, 1024]),
                               helper.make_tensor_value_info("z", TensorProto.INT64, [2048, 1024])], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    plan = tec.compile(model, targets="cpu")
    plan.save(str(tmp_path / "splats.tecplan"))
    assert os.path.getsize(tmp_path / "splats.tecplan") < 64 * 1024
    rng = np.random.default_rng(3)
    session = tec.Session(plan, device="cpu")
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(2):
        feed = {"x": rng.standard_normal((1, 1024)).astype(np.float32), "n": rng.integers(-9, 9, (1, 1024))}
        got, (y, z) = session.run(feed), reference.run(None, feed)
        np.testing.assert_allclose(got["y"], y, rtol=1e-6)
        np.testing.assert_array_equal(got["z"], z)


def test_errors_raise_their_classes_with_the_cli_messages(tmp_path):
    with pytest.raises(tec.BadModelError):
        tec.compile(b"not a protobuf at all", targets="cpu")
    model = onnx.load(MLP)
    node = model.graph.node[0]
    node.op_type, node.name = "Frobnicate", "frob_1"
    with pytest.raises(tec.UnsupportedError) as unsupported:
        tec.compile(model, targets="cpu")
    assert ("frob_1", "Frobnicate") in unsupported.value.operators
    second = model.graph.node[1]
    second.op_type, second.name = "Whatever", ""
    with pytest.raises(tec.UnsupportedError) as both:
        tec.compile(model, targets="cpu")
    assert both.value.operators == [("frob_1", "Frobnicate"), ("#1", "Whatever")]  # data, not parsed text
    with pytest.raises(tec.BadInputError, match="--target"):
        tec.compile(MLP, targets=["sm_12"])
    with pytest.raises(tec.BadInputError, match="--fp8"):
        tec.compile(MLP, targets="cpu", fp8="sometimes")
    session = tec.Session(tec.compile(MLP, targets="cpu"), device="cpu")
    with pytest.raises(tec.BadInputError, match="expected shape"):
        session.run({"x": np.zeros((3, 256), np.float32)})
    with pytest.raises(tec.BadInputError, match="missing inputs: x"):
        session.run({})
    with pytest.raises(tec.BadInputError, match="not an input"):
        session.run({"x": np.zeros((64, 256), np.float32), "z": np.zeros(1)})
    with pytest.raises(tec.BadInputError, match="outputs='device' needs the CUDA backend"):
        session.run({"x": np.zeros((64, 256), np.float32)}, outputs="device")
    with pytest.raises(tec.BadInputError, match="cannot open"):
        tec.load(str(tmp_path / "missing.tecplan"))
    trainer = tec.Trainer(tec.compile(MLP, targets="cpu", train=train_options()), device="cpu")
    with pytest.raises(tec.BadInputError, match="latest|checkpoint"):
        trainer.resume(str(tmp_path / "no-checkpoint-here"))
    assert issubclass(tec.BadInputError, tec.Error) and issubclass(tec.UnsupportedError, tec.Error)


class DLPackOnly:
    """A tensor reachable only through the DLPack protocol (as a framework's would be)."""

    def __init__(self, array):
        self._array = array
        self.shape, self.dtype = array.shape, array.dtype

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_any_dlpack_tensor_runs_as_a_numpy_array_does():
    x = np.random.default_rng(4).standard_normal((64, 256)).astype(np.float32)
    session = tec.Session(tec.compile(MLP, targets="cpu"), device="cpu")
    np.testing.assert_array_equal(session.run({"x": x})["y"], session.run({"x": DLPackOnly(x)})["y"])
    trainer = tec.Trainer(tec.compile(MLP, targets="cpu", train=train_options()), device="cpu")
    y = np.zeros((64, 16), np.float32)
    reference = tec.Trainer(trainer.plan, device="cpu").step({"x": x}, {"y": y})
    assert trainer.step({"x": DLPackOnly(x)}, {"y": DLPackOnly(y)}) == reference


def test_pytorch_tensors_run_as_numpy_arrays_do():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal((64, 256)).astype(np.float32)
    session = tec.Session(tec.compile(MLP, targets="cpu"), device="cpu")
    from_numpy = session.run({"x": x})["y"]
    from_torch = session.run({"x": torch.from_numpy(x.copy())})["y"]
    np.testing.assert_array_equal(from_numpy, from_torch)
    back = torch.from_dlpack(from_torch)  # the outputs are NumPy arrays, themselves DLPack producers
    assert tuple(back.shape) == (64, 16)


def test_a_session_outlives_its_plan_and_arrays_outlive_the_session():
    x = np.random.default_rng(3).standard_normal((64, 256)).astype(np.float32)
    session = tec.Session(tec.compile(MLP, targets="cpu"), device="cpu")  # the Plan object is not kept
    gc.collect()
    first = session.run({"x": x})["y"]
    second = session.run({"x": x * 2})["y"]
    del session
    gc.collect()
    assert not np.array_equal(first, second)  # each run's outputs are the caller's own
    assert np.isfinite(first).all()


def test_the_version_is_tecs_as_the_cli_says_it():
    assert tec.__version__ and tec.__version__[0].isdigit()
    assert cli("--version").startswith(f"tec {tec.__version__} ")


def test_doctor_reports_the_machine_as_a_dict():
    report = tec.doctor()
    assert "CPU BLAS" in report and "CPU threads" in report and "GPU" in report
    assert "single-threaded in tec's pool" in report["CPU BLAS"]


def test_doctor_leaves_no_library_it_probed_loaded():
    """What the doctor only looked at stays out of the process: a library left loaded satisfies by soname what
    the process loads later (the toolkit's older NCCL made `import torch` fail after tec.doctor())."""
    script = """
import os, re, sys, tec
report = tec.doctor()
maps = open("/proc/self/maps").read()
files = [re.search(r"\\((/[^)]+)\\)", report.get(name, "")) for name in ("NCCL", "NVRTC", "cuDNN")]
files = [os.path.realpath(f.group(1)) for f in files if f]  # maps names the file a symlink points to
print(len(files))
sys.exit(any(f in maps for f in files))
"""
    run = subprocess.run([os.sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, f"probed libraries left loaded: {run.stdout} {run.stderr}"
    if run.stdout.strip() == "0":
        pytest.skip("none of NCCL, NVRTC and cuDNN is on this machine")


def test_a_plan_inspects_as_text_and_data(tmp_path):
    plan = tec.compile(MLP, targets=["sm_90", "cpu"], train=train_options())
    variants = plan.variants()
    assert {(v["target"], v["kind"]) for v in variants} >= {("cpu", "inference"), ("cpu", "train"),
                                                            ("sm_90", "inference"), ("sm_90", "train")}
    assert all(v["steps"] > 0 and v["arena_bytes"] > 0 for v in variants)
    summary = plan.summary()
    assert "variant cpu" in summary and "memory: arena" in summary
    assert plan.metadata()["variants"][0]["steps"][0]["kernel"]
    assert "cpu" in plan.selection()  # no GPU here: the cpu variant, and why
    cli(MLP, "--target", "sm_90,cpu", "--train", "--loss", "mse", "-o", str(tmp_path / "p.tecplan"))
    assert json.loads(cli("inspect", str(tmp_path / "p.tecplan"), "--json"))["variants"] == plan.metadata()["variants"]


def two_headed_mlp(path, outputs=("logits", "embedding")):
    """x [8, 12] -> h = relu(x W1 + b1); logits = h W2 + b2 [8, 4]; embedding = h W3 [8, 6] (as CLIP's or
    ALBERT's several outputs over one trunk). `outputs` chooses which of them the graph returns."""
    rng = np.random.default_rng(3)
    inits = {"fc.weight": rng.standard_normal((12, 16)) * 0.3, "fc.bias": rng.standard_normal(16) * 0.1,
             "head.weight": rng.standard_normal((16, 4)) * 0.3, "head.bias": rng.standard_normal(4) * 0.1,
             "proj.weight": rng.standard_normal((16, 6)) * 0.3}
    h = onnx.helper
    nodes = [h.make_node("MatMul", ["x", "fc.weight"], ["xw"]), h.make_node("Add", ["xw", "fc.bias"], ["pre"]),
             h.make_node("Relu", ["pre"], ["h"]), h.make_node("MatMul", ["h", "head.weight"], ["hw"]),
             h.make_node("Add", ["hw", "head.bias"], ["logits"]), h.make_node("MatMul", ["h", "proj.weight"], ["embedding"])]
    shapes = {"logits": [8, 4], "embedding": [8, 6]}
    graph = h.make_graph(nodes, "two_heads", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [8, 12])],
                         [h.make_tensor_value_info(o, onnx.TensorProto.FLOAT, shapes[o]) for o in outputs],
                         [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.producer_name = "pytorch"
    onnx.save(model, str(path))
    return str(path)


def test_a_multi_output_model_trains_on_the_outputs_given_targets(tmp_path):
    # Trained on `logits` alone, the two-output model takes exactly the steps of the same model exported with
    # `logits` as its only output; with both targets it trains on both (another trajectory).
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 12)).astype(np.float32)
    logits, embedding = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 6)).astype(np.float32)
    both = tec.Trainer(tec.compile(two_headed_mlp(tmp_path / "two.onnx"), targets="cpu", train=train_options()),
                       device="cpu")
    alone = tec.Trainer(tec.compile(two_headed_mlp(tmp_path / "one.onnx", ("logits",)), targets="cpu",
                                    train=train_options()), device="cpu")
    got = [both.step({"x": x}, {"logits": logits}) for _ in range(3)]
    want = [alone.step({"x": x}, {"logits": logits}) for _ in range(3)]
    assert got == want
    with_embedding = both.step({"x": x}, {"logits": logits, "embedding": embedding})
    assert with_embedding > alone.step({"x": x}, {"logits": logits})  # the embedding's term adds to the loss
    with pytest.raises(tec.BadInputError, match="'pooled'"):
        both.step({"x": x}, {"pooled": logits})
    with pytest.raises(tec.BadInputError, match="at least one output"):
        both.step({"x": x}, {})

    # The CLI: --target names the outputs to train on, the others are said to be ignored; the same losses.
    plan = str(tmp_path / "two.tecplan")
    cli(str(tmp_path / "two.onnx"), "--target", "cpu", "--train", "--loss", "mse", "--optimizer", "adamw", "--lr",
        "1e-3", "-o", plan)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "logits.npy", logits)
    report = tmp_path / "report.json"
    out = cli("train", plan, "--input", f"x={tmp_path / 'x.npy'}", "--target", f"logits={tmp_path / 'logits.npy'}",
              "--steps", "3", "--report", str(report))
    assert "loss on logits; ignoring embedding (no --target)" in out
    assert [np.float32(v) for v in json.loads(report.read_text())["loss"]] == [np.float32(v) for v in want]


def test_from_torch_says_which_parameters_the_exporter_kept_from_training():
    torch = pytest.importorskip("torch")

    class Twins(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
            self.b.weight.data.copy_(self.a.weight.data)  # equal values: the TorchScript exporter merges them

        def forward(self, x):
            return self.b(self.a(x))

    class ConvBatchNorm(torch.nn.Module):  # in eval mode the exporter folds the norm into the conv
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return self.bn(self.conv(x))

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the merge is taken apart (an Identity per param): no warning
        plan = tec.from_torch(Twins().eval(), torch.randn(2, 8), input_names=["x"], output_names=["y"],
                              exporter="torchscript", targets=["cpu"], train=train_options())
    assert plan.untrained_parameters == []
    with pytest.warns(UserWarning, match="PyTorch parameters the plan will not train"):
        plan = tec.from_torch(ConvBatchNorm().eval(), torch.randn(2, 3, 6, 6), input_names=["x"],
                              output_names=["y"], exporter="torchscript", targets=["cpu"], train=train_options())
    folded = "folded into a constant by the exporter: it is not in the ONNX model"
    assert plan.untrained_parameters == [(name, folded) for name in ("conv.weight", "conv.bias", "bn.weight", "bn.bias")]
    assert "bn.weight: folded into a constant" in plan.compile_summary
    with pytest.raises(tec.BadInputError, match="exporter='onnxscript'"):
        tec.from_torch(Twins(), torch.randn(2, 8), exporter="onnxscript")


def test_fusion_switches_off_and_the_schedule_says_so(tmp_path):
    """Session(fusion=False) runs every plan step alone, as `tec run --no-fusion`; schedule() says how the
    backend took each step in; both give the same bits."""
    plan = tec.compile(os.path.join(MODELS, "gpt_block.onnx"), targets="cpu")
    fused, alone = tec.Session(plan, device="cpu"), tec.Session(plan, device="cpu", fusion=False)
    assert "in step 8: its epilogue (a residual add)" in fused.schedule()
    assert "in step" not in alone.schedule()
    rng = np.random.default_rng(3)
    inputs = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in fused.get_inputs()}
    for name, value in fused.run(inputs).items():
        np.testing.assert_array_equal(value, alone.run(inputs)[name])


def stacked_norms(path, merged_through_identity):
    """x [4, 8] -> two LayerNorms and a Linear, as a fresh PyTorch model has them: both norms' gains all ones and
    biases all zeros. PyTorch's exporters merge such equal initializers: the TorchScript exporter reads the
    merged one through an Identity named for each param it replaced (`merged_through_identity`), the dynamo
    exporter's optimizer lets both norms read the same one."""
    h = onnx.helper
    rng = np.random.default_rng(11)
    inits = {"norms.0.weight": np.ones(8), "norms.0.bias": np.zeros(8), "fc.weight": rng.standard_normal((8, 3)) * 0.3}
    second = ["norms.1.weight", "norms.1.bias"] if merged_through_identity else ["norms.0.weight", "norms.0.bias"]
    nodes = [h.make_node("LayerNormalization", ["x", "norms.0.weight", "norms.0.bias"], ["n0"], axis=-1),
             h.make_node("Relu", ["n0"], ["r"]),
             h.make_node("LayerNormalization", ["r", *second], ["n1"], axis=-1),
             h.make_node("MatMul", ["n1", "fc.weight"], ["y"])]
    if merged_through_identity:
        nodes = [h.make_node("Identity", ["norms.0.weight"], ["norms.1.weight"]),
                 h.make_node("Identity", ["norms.0.bias"], ["norms.1.bias"])] + nodes
    graph = h.make_graph(nodes, "norms", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 3])],
                         [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    if not merged_through_identity:  # dynamo signs each param in the graph's value infos
        for name, v in inits.items():
            info = h.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(v.shape))
            info.metadata_props.add(key="pkg.torch.export.graph_signature.InputSpec.kind", value="PARAMETER")
            graph.value_info.append(info)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], producer_name="pytorch")
    onnx.save(model, str(path))
    return str(path)


def test_params_an_exporter_merged_train_apart_as_in_pytorch(tmp_path):
    # Through Identity (TorchScript): each Identity of a param is a param of its own, named as in PyTorch, and
    # `export` writes it as an initializer again; the second norm's gain moves apart from the first's.
    plan = tec.compile(stacked_norms(tmp_path / "ts.onnx", True), targets="cpu", train=train_options())
    assert "norms.1.weight" in plan.compile_summary and "tied" not in plan.compile_summary
    trainer = tec.Trainer(plan, device="cpu")
    rng = np.random.default_rng(2)
    for _ in range(3):
        trainer.step({"x": rng.standard_normal((4, 8)).astype(np.float32)},
                     {"y": rng.standard_normal((4, 3)).astype(np.float32)})
    trainer.export(str(tmp_path / "trained.onnx"))
    model = onnx.load(str(tmp_path / "trained.onnx"))
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    assert {"norms.0.weight", "norms.1.weight", "norms.0.bias", "norms.1.bias"} <= weights.keys()
    assert not any(n.op_type == "Identity" for n in model.graph.node)
    assert not np.array_equal(weights["norms.0.weight"], weights["norms.1.weight"])
    x = rng.standard_normal((4, 8)).astype(np.float32)
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(str(tmp_path / "trained.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(trainer.predict({"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    # Read directly by both norms in a dynamo export (its optimizer merged them): one param, and the summary
    # says why it may be two; in a TorchScript export (no signature) a direct share is meant (ALBERT's layers).
    summary = tec.compile(stacked_norms(tmp_path / "dynamo.onnx", False), targets="cpu",
                          train=train_options()).compile_summary
    assert "tied     2 params" in summary and "norms.0.weight (LayerNormalization x 2)" in summary
    assert "optimize=False" in summary


def folded_layers(path, names, biases, shape_constant=False, bias_copied=False):
    """x [4, 8] through two MatMuls as TorchScript exports two Linears whose weights were equal: the transposes
    it folded merged into `onnx::MatMul_10`, the second layer reading it through an Identity under a made-up
    name. `names`: the two layers' module paths (node names carry them); `biases`: each layer's bias (None:
    bias-free; one name twice: one bias read by both); `bias_copied`: the second bias merged into the first,
    read through an Identity named for it (deep copies' equal biases); `shape_constant`: both layers reshape by
    one shape initializer, as exporters share them."""
    h = onnx.helper
    rng = np.random.default_rng(12)
    inits = {"onnx::MatMul_10": rng.standard_normal((8, 8)).astype(np.float32) * 0.3}
    nodes = [h.make_node("Identity", ["onnx::MatMul_10"], ["onnx::MatMul_11"])]
    for i, bias in enumerate(biases):
        if bias and i == 1 and bias_copied:
            nodes.append(h.make_node("Identity", [biases[0]], [bias]))
        elif bias and bias not in inits:
            inits[bias] = rng.standard_normal(8).astype(np.float32) * 0.1
    value = "x"
    for i, (name, bias, weight) in enumerate(zip(names, biases, ["onnx::MatMul_10", "onnx::MatMul_11"])):
        nodes.append(h.make_node("MatMul", [value, weight], [f"m{i}"], name=f"/{name}/MatMul"))
        value = f"m{i}"
        if bias:
            nodes.append(h.make_node("Add", [bias, value], [f"a{i}"], name=f"/{name}/Add"))
            value = f"a{i}"
        if shape_constant:
            nodes.append(h.make_node("Reshape", [value, "onnx::Reshape_5"], [f"r{i}"], name=f"/{name}/Reshape"))
            value = f"r{i}"
        nodes.append(h.make_node("Tanh", [value], ["y" if i == 1 else f"t{i}"], name=f"/{name}/Tanh"))
        value = f"t{i}"
    tensors = [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()]
    if shape_constant:
        tensors.append(onnx.numpy_helper.from_array(np.array([4, 8], dtype=np.int64), "onnx::Reshape_5"))
    graph = h.make_graph(nodes, "layers", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 8])], tensors)
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], producer_name="pytorch"), str(path))
    return str(path)


def test_deep_copied_layers_train_apart_and_a_shared_weight_stays_one(tmp_path):
    def summary(*layers, **options):
        path = folded_layers(tmp_path / "m.onnx", *layers, **options)
        return tec.compile(path, targets="cpu", train=train_options()).compile_summary
    # Deep copies (nn.TransformerEncoder's layers): their random biases were merged too, under module paths.
    copies = summary(["layers.0/fc", "layers.1/fc"], ["layers.0.fc.bias", "layers.1.fc.bias"], bias_copied=True)
    assert "onnx::MatMul_11" in copies and "layers.1.fc.bias" in copies
    # Bias-free entries of one list, even where both reshape by one shape initializer: copies.
    assert "onnx::MatMul_11" in summary(["layers.0", "layers.1"], [None, None], shape_constant=True)
    # A module called twice (ALBERT's shared layer: "_1" on its second call, one bias read by both): one param.
    assert "onnx::MatMul_11" not in summary(["first", "first_1"], ["first.bias", "first.bias"])
    # One weight assigned to two modules, each with its own random bias: one param.
    assert "onnx::MatMul_11" not in summary(["a", "b"], ["a.bias", "b.bias"])


def test_a_dynamo_export_says_which_random_params_several_modules_read(tmp_path):
    # The dynamo exporter's optimizer merges deep-copied layers' equal weights with no trace but the modules
    # of the nodes reading them (name scopes in each node's metadata): the summary lists such a param as tied.
    # A tied embedding (a Gather and a MatMul) is meant, and not listed.
    h = onnx.helper
    rng = np.random.default_rng(13)
    inits = {"layers.0.fc.weight": rng.standard_normal((8, 8)) * 0.3, "embed.weight": rng.standard_normal((16, 8))}
    def scoped(node, *scopes):
        node.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=repr(["", *scopes, "linear"]))
        return node
    nodes = [scoped(h.make_node("Gather", ["embed.weight", "ids"], ["e"]), "embed"),
             scoped(h.make_node("MatMul", ["e", "layers.0.fc.weight"], ["l0"]), "layers.0", "layers.0.fc"),
             h.make_node("Tanh", ["l0"], ["t0"]),
             scoped(h.make_node("MatMul", ["t0", "layers.0.fc.weight"], ["l1"]), "layers.1", "layers.1.fc"),
             scoped(h.make_node("Transpose", ["embed.weight"], ["et"], perm=[1, 0]), "head"),
             scoped(h.make_node("MatMul", ["l1", "et"], ["y"]), "head")]
    graph = h.make_graph(nodes, "layers", [h.make_tensor_value_info("ids", onnx.TensorProto.INT64, [4])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 16])],
                         [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    for name, v in inits.items():  # dynamo signs each param in the graph's value infos
        info = h.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(v.shape))
        info.metadata_props.add(key="pkg.torch.export.graph_signature.InputSpec.kind", value="PARAMETER")
        graph.value_info.append(info)
    path = str(tmp_path / "dynamo.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], producer_name="pytorch"), path)
    summary = tec.compile(path, targets="cpu", train=train_options()).compile_summary
    assert "tied     1 params" in summary and "layers.0.fc.weight (MatMul in layers.0.fc and 1 other module)" in summary
    assert "embed.weight (" not in summary and "optimize=False" in summary


def test_float64_constants_compute_in_float32_as_exporters_write_them(tmp_path):
    # BERT's attention scale as the TorchScript exporter writes it without constant folding: a DOUBLE
    # Constant, its Sqrt in double, a Cast to float. tec takes the double as float32 and says so; ONNX
    # Runtime computes it in double: the same to float32 rounding.
    h = onnx.helper
    scale = onnx.numpy_helper.from_array(np.array(0.125, dtype=np.float64))
    nodes = [h.make_node("Constant", [], ["c"], value=scale), h.make_node("Sqrt", ["c"], ["s"]),
             h.make_node("Cast", ["s"], ["f"], to=onnx.TensorProto.FLOAT), h.make_node("Mul", ["x", "f"], ["y"])]
    graph = h.make_graph(nodes, "scale", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3, 4])])
    path = str(tmp_path / "double.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    plan = tec.compile(path, targets="cpu")
    assert "float64  1 float64 constants and casts taken as float32" in plan.compile_summary
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(path).run(None, {"x": x})[0]
    np.testing.assert_allclose(tec.Session(plan, device="cpu").run({"x": x})["y"], want, rtol=1e-6)
    # A float64 output stays refused, naming the type.
    graph = h.make_graph(nodes + [h.make_node("Cast", ["y"], ["y64"], to=onnx.TensorProto.DOUBLE)], "scale",
                         [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4])],
                         [h.make_tensor_value_info("y64", onnx.TensorProto.DOUBLE, [3, 4])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    with pytest.raises(tec.UnsupportedError, match="DOUBLE"):
        tec.compile(path, targets="cpu")
