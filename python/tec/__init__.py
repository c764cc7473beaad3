"""tec from Python: compile an ONNX model, run and train the plan, over tec's C++ API (api/).

    import tec
    plan = tec.compile("model.onnx", shapes={"x": [64, 256]}, targets=["cpu"],
                       train=tec.TrainOptions(loss="mse", optimizer="adamw", lr=1e-3))
    trainer = tec.Trainer(plan)
    for x, y in loader:
        loss = trainer.step({"x": x}, {"y": y})

Keyword names mirror the CLI's flags (`--fp8-format` is `fp8_format`). Errors raise tec.Error subclasses
with the CLI's messages.
"""
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile
import warnings
from typing import Dict, List, Optional

import numpy as np

__all__ = ["Error", "BadModelError", "UnsupportedError", "BadInputError", "NonFiniteLossError", "TrainOptions", "Plan", "NodeArg", "Session",
           "Trainer", "compile", "load", "doctor", "from_torch"]


class Error(Exception):
    """A tec failure; the message is the CLI's."""


class BadModelError(Error):
    """The model is not a valid ONNX model (or not one tec can read)."""


class UnsupportedError(Error):
    """The model uses what tec does not support; `operators` lists the (node name, op type) pairs of the nodes
    it cannot compile (an operator tec lacks, or a form or element type of one)."""

    def __init__(self, message, operators=()):
        super().__init__(message)
        self.operators = [tuple(pair) for pair in operators]


class BadInputError(Error):
    """An option, a file or an input array tec cannot use (the user can fix it)."""


class NonFiniteLossError(Error):
    """A training step's loss was NaN or infinite (in a plan without loss scaling, which would have skipped
    the step): the weights that step updated are likely not finite either. `step` and `loss` say which."""

    def __init__(self, message, step: int, loss: float):
        super().__init__(message)
        self.step, self.loss = step, loss


def _error(kind, message, operators=()):
    """The exception for a C++ failure of `kind` (called by the extension)."""
    if kind == "unsupported":
        return UnsupportedError(message, operators)
    return {"bad_model": BadModelError, "bad_input": BadInputError}.get(kind, Error)(message)


from . import _tec  # noqa: E402  (after _error, which the extension calls)

#: tec's version (the CLI's `tec --version`, the wheel's).
__version__ = _tec.__version__


@dataclasses.dataclass
class TrainOptions:
    """A training step's loss and optimizer, as `tec model.onnx --train` takes them."""
    loss: str = "mse"
    optimizer: str = "adamw"
    lr: float = 1e-3
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int = 1000
    momentum: float = 0.0
    nesterov: bool = False
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    #: Decoupled for AdamW, L2 for SGD; 0 unless given, for AdamW too (torch.optim.AdamW's default is 0.01).
    weight_decay: float = 0.0
    clip_norm: float = 0.0
    frozen: str = ""
    trainable: str = ""
    loss_scale: float = 0.0
    loss_scale_growth_interval: int = 2000
    ignore_index: int = -100
    #: Gradient accumulation: each optimizer update applies the mean gradient of this many steps
    #: (micro-batches), as one step over a batch this many times larger; the schedule counts updates.
    accumulate: int = 1
    #: Data parallelism (a script under mpirun): MiB of gradients one all_reduce sums over the ranks.
    bucket_mb: float = 25.0
    #: ZeRO stage 1 for this many ranks (0: off): each rank holds and updates 1/N of the optimizer state;
    #: the plan then trains on exactly N ranks.
    shard_optimizer: int = 0


class Plan:
    """A compiled plan (.tecplan): what `tec.compile` returns and `tec.load` opens."""

    def __init__(self, path: str, _owned_dir: Optional[str] = None, compile_summary: str = ""):
        self.path = os.fspath(path)
        self._owned_dir = _owned_dir  # a temporary folder holding the plan, removed with this object
        #: What `tec model.onnx` prints: passes, fusions, each layer's precision per target and why, variants.
        self.compile_summary = compile_summary
        #: from_torch's (name, why) of each PyTorch parameter this plan will not train.
        self.untrained_parameters: List[tuple] = []

    def __del__(self):
        if getattr(self, "_owned_dir", None):
            shutil.rmtree(self._owned_dir, ignore_errors=True)

    def save(self, path: str) -> None:
        """Copies the plan to `path`."""
        shutil.copyfile(self.path, os.fspath(path))

    def inputs(self, kind: str = "inference") -> List[dict]:
        """The inputs of the variant this machine runs: name, dtype, shape."""
        opened = _tec.Session.open(self.path, "auto", 0) if kind == "inference" else \
            _tec.Trainer.open(self.path, "auto", 0, False)
        return opened.inputs()

    def summary(self) -> str:
        """The plan as `tec inspect` prints it: per variant its memory, steps and buffers."""
        return _tec.describe_plan(self.path, False)

    def metadata(self) -> dict:
        """The plan's metadata as data (`tec inspect --json`): variants, steps, buffers, attributes."""
        return json.loads(_tec.describe_plan(self.path, True))

    def variants(self) -> List[dict]:
        """Each variant: target, kind (inference or train), precision, steps, arena bytes."""
        return [{"target": v.get("target"), "kind": v.get("kind") or "inference", "precision": v.get("precision"),
                 "steps": len(v.get("steps", [])), "arena_bytes": int(v.get("arenaBytes", 0))}
                for v in self.metadata().get("variants", [])]

    def selection(self) -> str:
        """Which variant this machine runs and why (as `tec doctor PLAN` says)."""
        return doctor(self.path).get("plan", "")


def load(path: str) -> Plan:
    """Opens a plan written by `tec model.onnx` or Plan.save."""
    if not os.path.exists(path):
        raise BadInputError(f"{path}: cannot open: No such file or directory")
    return Plan(path)


def _model_source(model):
    """(path or serialized bytes, whether bytes) for a model given as a path, bytes or an onnx.ModelProto."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model), False
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), True
    raise BadInputError(f"model: expected a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


def compile(model, shapes: Optional[Dict[str, List[int]]] = None, targets=("all",), fp8: str = "auto",
            keep_precision: str = "", fp8_format: str = "default", amax_history: int = 1024, fp8_margin: int = 0,
            amax_algo: str = "max", fp8_emulate: bool = False, fp8_attention: bool = False, fast_gelu: bool = False,
            fp8_recipe: str = "delayed", fp8_block_scales: str = "pow2", fp8_calibration: Optional[str] = None,
            train: Optional[TrainOptions] = None, disable_pass=(), output: Optional[str] = None) -> Plan:
    """Compiles `model` (a path, bytes or an onnx.ModelProto) into a plan: written to `output` if given, else
    kept in a temporary file for as long as the Plan lives. `shapes` fixes dynamic dims (by input name, or a
    symbolic dim's name with a one-element list); `targets` as --target ("all", "auto", "cpu", "sm_90", ...);
    `fp8_recipe` as --fp8-recipe ("delayed", "current", "block", "mxfp8", then ";regex=recipe" per layer);
    `fp8_calibration` as --fp8-calibration (the JSON `tec calibrate --json` wrote: its recipes replace fp8_recipe)."""
    folder = tempfile.mkdtemp(prefix="tec-")
    try:
        source, is_bytes = _model_source(model)
        plan_path = os.fspath(output) if output else os.path.join(folder, "model.tecplan")
        if isinstance(targets, str):
            targets = [targets]
        strings = {"fp8": fp8, "keep_precision": keep_precision, "fp8_format": fp8_format, "amax_algo": amax_algo,
                   "fp8_recipe": fp8_recipe, "fp8_block_scales": fp8_block_scales}
        if fp8_calibration is not None:
            strings["fp8_calibration"] = os.fspath(fp8_calibration)
        numbers = {"amax_history": amax_history, "fp8_margin": fp8_margin, "fast_gelu": fast_gelu,
                   "fp8_emulate": fp8_emulate, "fp8_attention": fp8_attention}
        if train is not None:
            for field in dataclasses.fields(train):
                value = getattr(train, field.name)
                if field.type in (int, "int") and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
                    raise ValueError(f"TrainOptions.{field.name}: expected an integer, got {value!r}")
                (strings if isinstance(value, str) else numbers)[field.name] = value
        shape_lists = {name: [int(d) for d in (dims if hasattr(dims, "__len__") else [dims])]
                       for name, dims in (shapes or {}).items()}
        summary = _tec.compile_to_file(source, is_bytes, plan_path, shape_lists, list(targets), strings,
                                       {k: float(v) for k, v in numbers.items()}, train is not None,
                                       list(disable_pass))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if output:
        shutil.rmtree(folder, ignore_errors=True)
        return Plan(plan_path, compile_summary=summary)
    return Plan(plan_path, _owned_dir=folder, compile_summary=summary)


_DEVICE_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32", "i64": "int64",
                  "bool": "bool"}
_DTYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "bool": np.bool_}


def _label(name: str) -> str:
    """How messages name a plan input: "input 'x'", or "target 'y'" for a training step's "target:y"."""
    return f"target '{name[len('target:'):]}'" if name.startswith("target:") else f"input '{name}'"


def _host_array(value, info, cast: bool):
    """`value` as a C-contiguous CPU array of the tensor's dtype and shape: NumPy arrays and DLPack tensors
    (PyTorch's) already so are passed where they lie. An array of another dtype is refused unless `cast`;
    Python lists and scalars, which have none of their own, are converted."""
    want = _DTYPES.get(info["dtype"])
    if want is None:
        raise BadInputError(f"{_label(info['name'])}: tec takes it as {info['dtype']}, which NumPy has no type for")
    if not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__"):
        value = np.from_dlpack(value.detach() if hasattr(value, "detach") else value)
    if isinstance(value, np.ndarray) and value.dtype != want and not cast:
        raise BadInputError(f"{_label(info['name'])}: expected {np.dtype(want).name}, got {value.dtype.name} "
                            f"(convert it, or pass cast=True)")
    array = np.ascontiguousarray(value, dtype=want)
    if list(array.shape) != list(info["shape"]):
        shape = list(info["shape"])
        remedy = ""
        if array.ndim == len(shape) and array.ndim and 0 < array.shape[0] < shape[0] and list(array.shape[1:]) == shape[1:]:
            # The last batch of a data set that does not divide into the plan's (static) batch.
            remedy = (f": the plan's batch is {shape[0]}, this one has {array.shape[0]} (a data set's last, smaller "
                      "batch? drop it, e.g. DataLoader(drop_last=True), or pad it to the plan's batch)")
        raise BadInputError(f"{_label(info['name'])}: expected shape {shape}, got {list(array.shape)}{remedy}")
    return array


def _on_cuda(value) -> bool:
    """A DLPack tensor in CUDA memory (PyTorch's .cuda() tensors): kDLCUDA is device type 2."""
    return hasattr(value, "__dlpack_device__") and value.__dlpack_device__()[0] == 2


def _bind(native, infos, values: dict, prefix="", cast=False):
    by_name = {info["name"]: (i, info) for i, info in enumerate(infos) if not info["name"].startswith("loss-weight:")}
    for name, value in values.items():
        key = prefix + name
        if key not in by_name:
            expected = ", ".join(i["name"][len(prefix):] for i in infos if i["name"].startswith(prefix) and
                                 (prefix or not i["name"].startswith(("target:", "loss-weight:"))))
            raise BadInputError(f"'{name}': not {'a target' if prefix else 'an input'} of the plan (it has: {expected})")
        index, info = by_name[key]
        if _on_cuda(value) and hasattr(native, "set_input_device"):
            # Device memory is copied as it is: the plan's own dtype (a bf16 input takes bf16) and shape.
            dtype = str(getattr(value, "dtype", "")).replace("torch.", "")
            if _DEVICE_DTYPES.get(info["dtype"]) != dtype or list(value.shape) != list(info["shape"]):
                raise BadInputError(f"{_label(key)}: expected a {_DEVICE_DTYPES.get(info['dtype'])} tensor shaped "
                                    f"{list(info['shape'])}, got {dtype} {list(value.shape)}")
            native.set_input_device(index, value.contiguous() if hasattr(value, "contiguous") else value)
        else:
            native.set_input(index, _host_array(value.cpu() if _on_cuda(value) else value, info, cast))


_ONNX_TYPES = {"f32": "tensor(float)", "f16": "tensor(float16)", "bf16": "tensor(bfloat16)", "i32": "tensor(int32)",
               "i64": "tensor(int64)", "bool": "tensor(bool)"}


@dataclasses.dataclass(frozen=True)
class NodeArg:
    """An input or output as ONNX Runtime's NodeArg describes it."""
    name: str
    shape: List[int]
    type: str


class Session:
    """Runs a plan's inference variant: `run({"x": array})` returns the outputs by name as NumPy arrays.

    The weights are the plan's as compiled, or with `checkpoint="DIR"` those of DIR's latest checkpoint (what
    `trainer.save(DIR)` or `tec train --checkpoint-dir DIR` wrote); `Trainer.session()` gives one with a
    trainer's current weights. `weights` says which. Opening a plan that trains without a checkpoint warns:
    its weights are the untrained ones."""

    def __init__(self, plan, device: str = "auto", threads: int = 0, checkpoint: Optional[str] = None, *,
                 fusion: bool = True, _trainer=None):
        self.plan = plan if isinstance(plan, Plan) else load(plan)  # kept alive with the session
        if _trainer is not None:
            self._native = _tec.Session.open_with_trainer(self.plan.path, device, threads, _trainer._native, fusion)
        else:
            self._native = _tec.Session.open(self.plan.path, device, threads,
                                             os.fspath(checkpoint) if checkpoint is not None else "", fusion)
            if checkpoint is None and any(v["kind"] == "train" for v in self.plan.variants()):
                warnings.warn("tec.Session runs this plan's weights as compiled, untrained: pass checkpoint=DIR "
                              "for a checkpoint's, or use trainer.session() / trainer.predict()", stacklevel=2)
        self._inputs = self._native.inputs()
        self._outputs = self._native.outputs()

    @property
    def weights(self) -> str:
        """Where the weights come from: "plan" (as compiled), "checkpoint DIR/step-N" or "trainer step N"."""
        return self._native.weights()

    @property
    def selection_reason(self) -> str:
        """Which variant and backend run, and why (one line, as `tec run` prints it)."""
        return self._native.selection_reason()

    def schedule(self) -> str:
        """How the backend runs the variant, as `tec inspect --schedule` prints it: each plan step's launch, or
        the step whose launch took it in and how (a GEMM's epilogue, an elementwise chain, ...). With
        `fusion=False` every step runs alone (the same bits)."""
        return self._native.schedule()

    def get_inputs(self) -> List["NodeArg"]:
        """The plan's inputs as ONNX Runtime describes them: name, shape, type ("tensor(float)")."""
        return [NodeArg(i["name"], list(i["shape"]), _ONNX_TYPES[i["dtype"]]) for i in self._inputs]

    def get_outputs(self) -> List["NodeArg"]:
        """The plan's outputs, as get_inputs."""
        return [NodeArg(o["name"], list(o["shape"]), _ONNX_TYPES[o["dtype"]]) for o in self._outputs]

    def run(self, inputs, feed: Optional[dict] = None, outputs: str = "numpy", cast: bool = False):
        """Runs the plan on `inputs` (a dict by input name) and returns the outputs as a dict by name.
        ONNX Runtime's form works too: `run(output_names, feed)` (names, or None for all) returns a list in
        that order. An array of another dtype than the input's is refused unless `cast=True`.
        outputs="numpy": copies as NumPy arrays; "device": on the CUDA backend, DLPack tensors where the
        outputs lie on the GPU (torch.from_dlpack takes them without a copy), valid until the next run."""
        names = None
        if feed is not None or not isinstance(inputs, dict):  # ONNX Runtime's run(output_names, input_feed)
            if not isinstance(feed, dict):
                raise BadInputError("run: expected run({name: array}) or ONNX Runtime's run(output_names, {name: array})")
            names = [o["name"] for o in self._outputs] if inputs is None else list(inputs)
            unknown = [n for n in names if n not in {o["name"] for o in self._outputs}]
            if unknown:
                raise BadInputError(f"output_names: {', '.join(map(repr, unknown))} not an output of the plan (it has: "
                                    f"{', '.join(o['name'] for o in self._outputs)})")
            inputs = feed
        missing = [i["name"] for i in self._inputs if i["name"] not in inputs]
        if missing:
            raise BadInputError(f"missing inputs: {', '.join(missing)}")
        if outputs not in ("numpy", "device"):
            raise BadInputError(f"outputs={outputs!r}: expected 'numpy' or 'device'")
        _bind(self._native, self._inputs, inputs, cast=cast)
        self._native.run()
        result = self._collect(outputs)
        return result if names is None else [result[n] for n in names]

    def _collect(self, outputs: str) -> dict:
        if outputs == "device":
            views = {o["name"]: self._native.output_device(i) for i, o in enumerate(self._outputs)}
            if any(v is None for v in views.values()):
                raise BadInputError(f"outputs='device' needs the CUDA backend; {self.selection_reason}")
            return views
        return {o["name"]: np.frombuffer(self._native.output(i), dtype=_DTYPES.get(o["dtype"], np.uint8))
                .reshape(o["shape"]).copy() for i, o in enumerate(self._outputs)}


class Trainer:
    """A plan's training step: `step(inputs, targets)` returns the loss (dicts keyed by the model's input
    and output names); checkpoints with save/resume; FP8 health; export to ONNX."""

    def __init__(self, plan, device: str = "auto", threads: int = 0, fp8_stats: bool = True,
                 stop_on_nonfinite: bool = True, fusion: bool = True, collective_timeout: float = 300):
        self.plan = plan if isinstance(plan, Plan) else load(plan)
        if not 0 <= collective_timeout <= 1e7:
            raise BadInputError(f"collective_timeout={collective_timeout}: expected seconds in [0, 1e7] (0: forever)")
        #: A step whose loss is NaN or infinite raises NonFiniteLossError (False: returns the loss as it is).
        self.stop_on_nonfinite = stop_on_nonfinite
        self._native = _tec.Trainer.open(self.plan.path, device, threads, fp8_stats, fusion)
        # Under mpirun: how long a collective waits for every rank before step() raises (a rank that hung).
        self._native.set_collective_timeout(float(collective_timeout))
        self._inputs = self._native.inputs()
        self._device, self._threads, self._fusion = device, threads, fusion
        self._predictor = None  # (steps, Session) of predict()

    @property
    def steps(self) -> int:
        """Training steps taken, counting those of a resumed checkpoint."""
        return self._native.steps()

    @property
    def rank(self) -> int:
        """This process's rank among those mpirun or srun started (0 alone). Data parallelism is in every
        training plan: under mpirun each rank steps on its own share of the global batch (the plan's batch)
        and the collectives in the step keep every rank's weights the same."""
        return self._native.process_group()[0]

    @property
    def world_size(self) -> int:
        """The ranks training together (1 alone): the global batch is world_size times the plan's."""
        return self._native.process_group()[1]

    @property
    def accumulate(self) -> int:
        """The steps whose mean gradient one optimizer update applies (TrainOptions.accumulate): the update
        comes with every accumulate-th step; 1 where every step updates."""
        return self._native.accumulation()

    @property
    def lr(self) -> float:
        """The base learning rate of the next steps (the compiled TrainOptions.lr until set; the schedule, if
        any, scales it). Settable between steps, as PyTorch schedulers set an optimizer's; kept in checkpoints."""
        return self._native.learning_rate()

    @lr.setter
    def lr(self, value: float) -> None:
        self._native.set_learning_rate(float(value))

    @property
    def selection_reason(self) -> str:
        """Which variant and backend train, and why (one line, as `tec train` prints it)."""
        return self._native.selection_reason()

    def step(self, inputs: dict, targets: dict, cast: bool = False) -> float:
        """One training step on `inputs` against `targets` (dicts by the model's input and output names); returns
        the loss. A multi-output model trains on the outputs given a target (at least one) and ignores the
        others. Arrays of another dtype than the plan's are refused unless `cast=True`."""
        missing = [i["name"] for i in self._inputs if not i["name"].startswith(("target:", "loss-weight:")) and
                   i["name"] not in inputs]
        if missing:
            raise BadInputError(f"missing inputs: {', '.join(missing)}")
        if set(targets) != set(self._native.trained_outputs()):
            self._native.train_on(list(targets))
        _bind(self._native, self._inputs, inputs, cast=cast)
        _bind(self._native, self._inputs, targets, prefix="target:", cast=cast)
        loss = self._native.step()
        if not math.isfinite(loss) and self.stop_on_nonfinite and self._native.loss_scale() is None:
            raise NonFiniteLossError(f"step {self.steps}: the loss is {loss}; the weights this step updated are likely "
                                     "not finite either (resume from a checkpoint; Trainer(stop_on_nonfinite=False) "
                                     "goes on)", self.steps, loss)
        return loss

    def fit(self, loader, epochs: int = 1, callbacks=(), checkpoint_dir: Optional[str] = None,
            progress: bool = True) -> Dict[str, List[float]]:
        """Trains over `loader` (any iterable of batches, a torch DataLoader included) for `epochs`. A batch is
        (inputs, targets) as two dicts by name, or (x, y) arrays for a model of one input and one output.
        After each epoch: a checkpoint in `checkpoint_dir` if given, then each callback(trainer, epoch, logs)
        with logs = {"loss": the epoch's mean loss, "steps": steps so far}. A progress bar (tqdm, where
        installed; else a line per epoch) unless progress=False. Returns {"loss": [each epoch's mean]}."""
        names = [i["name"] for i in self._inputs if not i["name"].startswith(("target:", "loss-weight:"))]
        outputs = self._native.trained_outputs()
        history: Dict[str, List[float]] = {"loss": []}
        for epoch in range(epochs):
            batches = loader
            if progress:
                try:
                    from tqdm.auto import tqdm
                    batches = tqdm(loader, desc=f"epoch {epoch + 1}/{epochs}", leave=False)
                except ImportError:
                    pass
            total, count = 0.0, 0
            for batch in batches:
                if isinstance(batch, (list, tuple)) and len(batch) == 2 and isinstance(batch[0], dict):
                    inputs, targets = batch
                elif isinstance(batch, (list, tuple)) and len(batch) == 2 and len(names) == 1 and len(outputs) == 1:
                    inputs, targets = {names[0]: batch[0]}, {outputs[0]: batch[1]}
                else:
                    raise BadInputError("fit: a batch must be (inputs, targets) dicts, or (x, y) for a model of one "
                                        f"input and one output (this one has inputs {names}, outputs {outputs})")
                total += self.step(inputs, targets)
                count += 1
            logs = {"loss": total / max(count, 1), "steps": self.steps}
            history["loss"].append(logs["loss"])
            if checkpoint_dir is not None:
                self.save(checkpoint_dir)
            if progress:
                print(f"epoch {epoch + 1}/{epochs}: loss {logs['loss']:.6g} ({count} steps, {self.steps} in all)"
                      + (f", checkpoint {checkpoint_dir}/step-{self.steps}" if checkpoint_dir is not None else ""),
                      file=sys.stderr)
            for callback in callbacks:
                callback(self, epoch, logs)
        return history

    def session(self, device: Optional[str] = None, threads: Optional[int] = None) -> "Session":
        """An inference Session with the weights as trained so far (a snapshot: after more steps, ask again).
        Device and threads default to the trainer's."""
        return Session(self.plan, device if device is not None else self._device,
                       threads if threads is not None else self._threads, fusion=self._fusion, _trainer=self)

    def predict(self, inputs: dict) -> dict:
        """The model's outputs on `inputs` with the weights as trained so far (the inference variant; a session
        made once per step count and reused)."""
        if self._predictor is None or self._predictor[0] != self.steps:
            self._predictor = (self.steps, self.session())
        return self._predictor[1].run(inputs)

    def save(self, directory: str) -> None:
        """A checkpoint in DIR/step-N (atomically; DIR/latest points at it)."""
        os.makedirs(directory, exist_ok=True)
        self._native.save(os.fspath(directory))

    def resume(self, directory: str) -> int:
        """Restores DIR's latest checkpoint; returns its step."""
        self._predictor = None
        return self._native.resume(os.fspath(directory))

    def fp8_report(self) -> List[dict]:
        """Per FP8-quantized tensor: amax, scale, the last step's saturated and flushed shares, recent amaxes."""
        return self._native.fp8_health()

    def export(self, path: str) -> None:
        """Writes the model with the trained weights as ONNX."""
        folder = tempfile.mkdtemp(prefix="tec-export-")
        try:
            self._native.save(folder)
            _tec.export_onnx(self.plan.path, folder, os.fspath(path))
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def doctor(plan: Optional[str] = None) -> Dict[str, str]:
    """What this machine runs (`tec doctor`) as a dict: GPU, CUDA libraries, FP8, CPU BLAS, threads... A key
    the report gives twice (two BLAS libraries) and the notes under a fact join its value, a line each."""
    result = {}
    key = None
    for name, value in _tec.doctor(os.fspath(plan) if plan else ""):
        key = name or key  # an unnamed fact is a note on the one before
        if key is not None:
            result[key] = f"{result[key]}\n{value}" if key in result else value
    return result


def from_torch(module, example_inputs, input_names=None, output_names=None, exporter: str = "dynamo",
               export_options: Optional[dict] = None, **compile_options) -> Plan:
    """Exports `module` with torch.onnx.export and compiles it; keyword options go to compile.

    exporter: "dynamo" (torch.export's, torch's default since 2.9) or "torchscript" (the legacy one, at opset
    17 unless export_options say otherwise). export_options: more keyword arguments for torch.onnx.export
    (opset_version, dynamic_shapes, training, ...). Exporters fold initializers they take for constants and
    merge equal ones: every trainable parameter of `module` the plan will not train is listed, with why, in a
    warning and in plan.compile_summary (and plan.untrained_parameters)."""
    import torch  # an optional dependency
    if exporter not in ("dynamo", "torchscript"):
        raise BadInputError(f"exporter={exporter!r}: expected 'dynamo' or 'torchscript'")
    if exporter == "dynamo":
        try:
            import onnxscript  # noqa: F401  (what torch's dynamo exporter writes ONNX with)
        except ImportError:
            raise BadInputError("the dynamo exporter needs onnxscript (pip install onnxscript), or pass "
                                "exporter='torchscript'") from None
    folder = tempfile.mkdtemp(prefix="tec-torch-")
    try:
        path = os.path.join(folder, "model.onnx")
        args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
        options = {"input_names": input_names, "output_names": output_names, "dynamo": exporter == "dynamo"}
        if exporter == "torchscript":
            options["opset_version"] = 17
        else:
            options["verbose"] = False
        options.update(export_options or {})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter's, asked for
            torch.onnx.export(module, args, path, **options)
        plan = compile(path, **compile_options)
        plan.untrained_parameters = _untrained_parameters(module, path, plan)
        if plan.untrained_parameters:
            lines = [f"  {name}: {why}" for name, why in plan.untrained_parameters]
            note = ("PyTorch parameters the plan will not train:\n" + "\n".join(lines) +
                    "\n  (export in training mode, export_options={'training': torch.onnx.TrainingMode.TRAINING, "
                    "'do_constant_folding': False} with the TorchScript exporter, keeps them as initializers)")
            plan.compile_summary += ("\n" if plan.compile_summary else "") + note + "\n"
            warnings.warn(note, stacklevel=2)
        return plan
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _untrained_parameters(module, onnx_path: str, plan: Plan) -> List[tuple]:
    """(name, why) for each trainable parameter of `module` that the plan at `onnx_path` will not train: the
    exporter merged it with an equal one (it trains as that one), folded it into a constant, or the plan takes
    it as a constant. With no train variant, the ONNX model's initializers stand for what would train."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(onnx_path)
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    trained = {b["name"] for v in plan.metadata().get("variants", []) if v.get("kind") == "train"
               for b in v.get("buffers", []) if b.get("role") == "STATE" and b.get("kind") == "KIND_PARAM"}
    has_train_variant = any(v["kind"] == "train" for v in plan.variants())
    result = []
    names = {name for name, _ in module.named_parameters()}
    for name, parameter in module.named_parameters():
        if not parameter.requires_grad or (name in trained if has_train_variant else name in initializers):
            continue
        value = parameter.detach().cpu().numpy()
        if name in initializers:
            why = "an initializer the plan takes as a constant (pass its name to TrainOptions(trainable=...))"
        else:
            same = [other for other, array in initializers.items()
                    if array.shape == value.shape and array.dtype == value.dtype and np.array_equal(array, value)]
            if not same:
                why = "folded into a constant by the exporter: it is not in the ONNX model"
            elif same[0] in names:
                why = f"merged by the exporter with the equal parameter '{same[0]}': it trains as that one"
            else:
                why = f"renamed '{same[0]}' by the exporter: it trains under that name, not its own"

        result.append((name, why))
    return result
