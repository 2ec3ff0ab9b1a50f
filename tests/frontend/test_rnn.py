"""LSTM, GRU and RNN unrolled by the frontend: compiled, interpreted and compared with ORT."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from frontend_testutil import import_error
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.frontend import import_model
from npucc.tools.cli import main

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
BATCH, INPUT, HIDDEN = 2, 3, 4
KINDS = [("LSTM", {}), ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("RNN", {})]


def _model(
    kind: str,
    seq: int,
    *,
    direction: str = "forward",
    layout: int = 0,
    bias: bool = True,
    initial: str = "",  # "" (none), "const" (initializers) or "input" (graph inputs)
    outputs: tuple[str, ...] = ("Y", "Y_h", "Y_c"),
    peepholes: bool = False,
    **attrs: object,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A one-node recurrent model (node 'rnn', opset 14) and random feeds for its inputs."""
    rng = np.random.default_rng(3)
    dirs = 2 if direction == "bidirectional" else 1
    width = GATES[kind] * HIDDEN

    def weights(*shape: int) -> np.ndarray:
        return (0.5 * rng.standard_normal(shape)).astype(np.float32)

    inits = {"W": weights(dirs, width, INPUT), "R": weights(dirs, width, HIDDEN)}
    if bias:
        inits["B"] = weights(dirs, 2 * width)
    x_shape = (BATCH, seq, INPUT) if layout else (seq, BATCH, INPUT)
    state_shape = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    graph_inputs = {"X": x_shape}
    names = ["X", "W", "R", "B" if bias else "", ""]
    for state in ["initial_h", "initial_c"][: 2 if kind == "LSTM" else 1]:
        if initial == "input":
            graph_inputs[state] = state_shape
        elif initial == "const":
            inits[state] = weights(*state_shape)
        names.append(state if initial else "")
    if peepholes:
        inits["P"] = weights(dirs, 3 * HIDDEN)
        names.append("P")
    outs = [o if o in outputs else "" for o in ("Y", "Y_h", "Y_c")[: 3 if kind == "LSTM" else 2]]
    while not names[-1]:
        names.pop()
    while not outs[-1]:
        outs.pop()
    if layout:
        attrs["layout"] = layout
    node = helper.make_node(
        kind, names, outs, name="rnn", hidden_size=HIDDEN, direction=direction, **attrs
    )
    graph = helper.make_graph(
        [node],
        "rnn",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in graph_inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in graph_inputs.items()}
    return model, feeds


def _reference(kind: str, seq: int, feeds: dict[str, np.ndarray], **options) -> list[np.ndarray]:
    """onnxruntime's outputs; layout 1 (which it lacks) through the layout-0 model, transposed."""
    layout = options.pop("layout", 0)
    model, _ = _model(kind, seq, **options)
    if layout:
        feeds = {n: v.transpose(1, 0, 2) for n, v in feeds.items()}
    outs = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    if layout:  # Y [S, D, B, H] -> [B, S, D, H]; Y_h, Y_c [D, B, H] -> [B, D, H]
        outs = [o.transpose(2, 0, 1, 3) if o.ndim == 4 else o.transpose(1, 0, 2) for o in outs]
    return outs


def _check(kind: str, seq: int, **options) -> npucc.Program:
    """Compile and run the model with npucc; every output within 1e-4 of onnxruntime's."""
    model, feeds = _model(kind, seq, **options)
    program = npucc.compile(model, beam_width=4)
    got = program.run(feeds)
    names = [o.name for o in model.graph.output]
    for name, ref in zip(names, _reference(kind, seq, feeds, **options), strict=True):
        assert got[name].shape == ref.shape, name
        err = float(np.max(np.abs(got[name] - ref)))
        assert err <= 1e-4 * float(np.max(np.abs(ref))) + 1e-5, (name, err)
    return program


@pytest.mark.parametrize(("kind", "attrs"), KINDS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_and_layouts(kind, attrs, direction, layout):
    _check(kind, 10, direction=direction, layout=layout, initial="input", **attrs)


@pytest.mark.parametrize(("kind", "attrs"), KINDS)
@pytest.mark.parametrize(
    ("seq", "initial", "bias"),
    [(1, "", False), (10, "", True), (10, "const", False), (1, "input", True)],
)
def test_initial_states_and_bias(kind, attrs, seq, initial, bias):
    _check(kind, seq, direction="bidirectional", initial=initial, bias=bias, **attrs)


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("LSTM", {"peepholes": True, "initial": "input", "direction": "bidirectional"}),
        ("LSTM", {"peepholes": True, "clip": 0.3, "layout": 1}),
        ("LSTM", {"input_forget": 1, "initial": "const"}),
        ("LSTM", {"clip": 0.7, "direction": "reverse"}),
        ("GRU", {"clip": 0.7, "initial": "input"}),
        ("GRU", {"clip": 0.7, "linear_before_reset": 1}),
        ("RNN", {"clip": 0.7, "initial": "const"}),
        (
            "LSTM",
            {
                "activations": ["Relu", "Sigmoid", "Relu", "Tanh", "Tanh", "Sigmoid"],
                "direction": "bidirectional",
            },
        ),  # fmt: skip
        ("GRU", {"activations": ["Relu", "Tanh"], "initial": "input"}),
        ("RNN", {"activations": ["Sigmoid"]}),
        ("RNN", {"activations": ["Relu"], "layout": 1}),
    ],
)
def test_peepholes_clip_and_activations(kind, options):
    _check(kind, 6, **options)


@pytest.mark.parametrize(("kind", "output"), [("LSTM", "Y_h"), ("LSTM", "Y_c"), ("GRU", "Y")])
def test_a_subset_of_the_outputs(kind, output):
    _check(kind, 10, outputs=(output,), direction="bidirectional", layout=1)


def test_one_input_projection_per_node_and_few_layers_per_step():
    model, _ = _model("LSTM", 10, direction="bidirectional", outputs=("Y_h",))
    layers = [layer for layer in import_model(model).layers if layer.op != "reshape"]
    # one projection gemm, then per direction a recurrent gemm from the second step on
    assert sum(layer.op == "gemm" for layer in layers) == 1 + 2 * 9
    assert len(layers) <= 1 + 2 * 10 * 13 + 1


def _with(model: onnx.ModelProto, **attrs: object) -> onnx.ModelProto:
    """The model with the node's attributes set (added or replaced)."""
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name not in attrs]
    del node.attribute[:]
    node.attribute.extend([*kept, *(helper.make_attribute(k, v) for k, v in attrs.items())])
    return model


def test_run_time_weights_are_a_cleanimport_error():
    model, _ = _model("GRU", 3)
    weights = model.graph.initializer.pop(0)  # W becomes a graph input
    model.graph.input.append(
        helper.make_tensor_value_info(weights.name, TensorProto.FLOAT, list(weights.dims))
    )
    assert import_error(model) == "node 'rnn' (GRU): W, R and B must be constant"


def test_sequence_lens_must_be_the_full_length():
    model, _ = _model("LSTM", 5, initial="const")  # input 4 is the absent sequence_lens
    model.graph.initializer.append(
        numpy_helper.from_array(np.array([5, 3], np.int32), "sequence_lens")
    )
    model.graph.node[0].input[4] = "sequence_lens"
    message = "node 'rnn' (LSTM): sequence_lens must be the sequence length 5 for every batch entry"
    assert import_error(model) == message
    model.graph.initializer[-1].CopyFrom(
        numpy_helper.from_array(np.array([5, 5], np.int32), "sequence_lens")
    )
    import_model(model)  # the full length everywhere: accepted


def test_unsupported_activation_is_a_cleanimport_error():
    model = _with(_model("RNN", 3)[0], activations=["Softsign"])
    assert import_error(model) == "node 'rnn' (RNN): activation Softsign is not supported"


def test_cli_reports_one_error_line(tmp_path, capsys):
    path = tmp_path / "rnn.onnx"
    path.write_bytes(_with(_model("LSTM", 3)[0], activations=["Elu"] * 3).SerializeToString())
    assert main(["check", str(path), "--quiet"]) != 0
    err = capsys.readouterr().err.strip()
    assert err == "npucc: error: node 'rnn' (LSTM): activation Elu is not supported"
