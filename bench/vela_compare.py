"""npucc against Arm's Vela on the same Keras networks: compile wall time and peak RSS (issue 18).

Builds Keras ResNet50 and MobileNetV2 (224x224, seeded random weights), exports each as ONNX
for npucc (tf2onnx) and as full-int8 TFLite for Vela (post-training quantization on random
calibration images), then compiles each model with both compilers alternately, `--repeat`
times each, and prints per model the median wall time, CPU time (user+sys) and peak RSS of
each compiler and npucc's ratios to Vela's (the issue's goal: both ratios <= 2).

TensorFlow, tf2onnx and Vela are for this benchmark only, not npucc dependencies; install them
in a separate environment (TensorFlow pins its own protobuf and numpy):

    python -m venv /tmp/bench-venv
    /tmp/bench-venv/bin/pip install tensorflow tf2onnx ethos-u-vela
    /tmp/bench-venv/bin/python bench/vela_compare.py --vela /tmp/bench-venv/bin/vela

Run it with the venv's python (model building needs TensorFlow); npucc is run as
`NPUCC_PYTHON -m npucc` (`--npucc-python`, default `python3`: the first on PATH, which must be
the environment that has npucc installed, not the venv; resolved to the interpreter itself, as
Vela's console script starts its own, not through a launcher such as pyenv's shims).
`--models-dir` keeps the built model files; an existing file is reused (delete it to
rebuild). npucc's package is byte-compiled first (`compileall`), as Vela's wheel install left
its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

NETS = ("resnet50", "mobilenet_v2")


def build(net: str, out: Path) -> tuple[Path, Path]:
    """Build the Keras network with seeded random weights; write NET.onnx and NET_int8.tflite."""
    onnx_path, tflite_path = out / f"{net}.onnx", out / f"{net}_int8.tflite"
    if onnx_path.exists() and tflite_path.exists():
        return onnx_path, tflite_path
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf
    import tf2onnx

    keras.utils.set_random_seed(0)
    make = {"resnet50": keras.applications.ResNet50, "mobilenet_v2": keras.applications.MobileNetV2}
    model = make[net](weights=None, input_shape=(224, 224, 3))
    spec = (tf.TensorSpec((1, 224, 224, 3), tf.float32, name="input"),)

    @tf.function(input_signature=spec)
    def forward(x: tf.Tensor) -> tf.Tensor:
        return model(x, training=False)

    tf2onnx.convert.from_function(
        forward, input_signature=spec, opset=17, output_path=str(onnx_path)
    )
    saved = out / f"{net}_savedmodel"
    model.export(str(saved), verbose=False)
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(0)
    converter.representative_dataset = lambda: (
        [rng.standard_normal((1, 224, 224, 3)).astype(np.float32)] for _ in range(8)
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    tflite_path.write_bytes(converter.convert())
    shutil.rmtree(saved)
    return onnx_path, tflite_path


def measure(cmd: list[str]) -> dict[str, float]:
    """Run one compiler command; its wall seconds, CPU seconds (user+sys) and peak RSS (MiB)."""
    # NOTE: /usr/bin/time measures the child, so the RSS is the compiler's own peak.
    with tempfile.NamedTemporaryFile("r", suffix=".time") as f:
        proc = subprocess.run(
            ["/usr/bin/time", "-o", f.name, "-f", "%e %U %S %M", *cmd],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            sys.exit(f"vela_compare: {' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
        wall, user, system, kib = f.read().split()[-4:]
    return {
        "wall_s": float(wall),
        "cpu_s": float(user) + float(system),
        "peak_mib": int(kib) / 1024,
    }


def cache_bytecode(python: str) -> str:
    """Byte-compile the npucc package that PYTHON imports, as a pip install leaves it; the
    interpreter itself (its `sys.executable`), which the timed runs then start.

    NOTE: Vela comes from a wheel whose install wrote its byte code; npucc from an editable
    install under PYTHONDONTWRITEBYTECODE would otherwise recompile its sources on every run.
    And Vela's console script starts its interpreter directly, where a `python3` found on PATH
    may be a launcher (pyenv's shims are bash scripts: ~0.25 s wall a run on this machine).
    """
    exe, where = subprocess.run(
        [python, "-c", "import npucc, os, sys; print(sys.executable);"
         " print(os.path.dirname(npucc.__file__))"],
        capture_output=True, text=True, check=True,
    ).stdout.split("\n")[:2]  # fmt: skip
    subprocess.run([exe, "-m", "compileall", "-q", where], check=True)
    return exe


def compare(net: str, onnx_path: Path, tflite_path: Path, args: argparse.Namespace) -> dict:
    """Compile NET with npucc and Vela alternately; medians and npucc/Vela ratios."""
    work = Path(tempfile.mkdtemp(prefix=f"vela_compare_{net}_"))
    npucc_cmd = [*args.npucc, str(onnx_path), "--target", args.target, "-o", str(work / "o.cmd")]
    vela_cmd = [args.vela, "--accelerator-config", args.accelerator, "--output-dir",
                str(work / "vela"), str(tflite_path)]  # fmt: skip
    runs: dict[str, list[dict[str, float]]] = {"npucc": [], "vela": []}
    for _ in range(args.repeat):
        runs["npucc"].append(measure(npucc_cmd))
        runs["vela"].append(measure(vela_cmd))
    shutil.rmtree(work)
    med = {
        tool: {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[0]}
        for tool, rs in runs.items()
    }
    return {
        "model": net,
        "npucc": med["npucc"],
        "vela": med["vela"],
        "ratio": {k: round(med["npucc"][k] / med["vela"][k], 2) for k in med["npucc"]},
    }


def main() -> None:
    """Print one JSON line per network."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="*", choices=NETS, default=list(NETS))
    p.add_argument("--models-dir", type=Path, default=Path(tempfile.gettempdir()) / "vela_compare")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--build", choices=NETS, help="only build this network's model files")
    p.add_argument("--target", default="davinci-core")
    p.add_argument("--accelerator", default="ethos-u55-256", help="Vela's --accelerator-config")
    p.add_argument("--vela", default=shutil.which("vela") or "vela")
    p.add_argument("--npucc-python", default="python3", help="the python that has npucc")
    args = p.parse_args()
    args.models_dir.mkdir(parents=True, exist_ok=True)
    args.npucc = [cache_bytecode(args.npucc_python), "-m", "npucc"]
    if args.build:
        build(args.build, args.models_dir)
        return
    for net in args.models:
        # NOTE: TensorFlow builds in its own process (several GB), never beside the timed runs.
        subprocess.run([sys.executable, __file__, "--build", net, "--models-dir",
                        str(args.models_dir)], check=True)  # fmt: skip
        onnx_path, tflite_path = build(net, args.models_dir)
        print(json.dumps(compare(net, onnx_path, tflite_path, args)), flush=True)


if __name__ == "__main__":
    main()
