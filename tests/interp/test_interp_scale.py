import time

import numpy as np
from interp_helpers import run_text, stream_text

N = 256  # elements per tile


def pipeline(iterations: int) -> str:
    """Double-buffered load -> relu on every other element -> store, 3 instructions a tile."""
    body = [f"alloc UB[0x{0x1000 * s:06x}+{N * 4}] b={s}" for s in range(2)]
    for i in range(iterations):
        ub = f"UB[0x{0x1000 * (i % 2):06x}+{N * 4}]"
        src = f"DDR[0x{(i % 16) * N * 4:06x}+{N * 4}]"
        dst = f"DDR[0x{0x4000 + i * N * 4:06x}+{N * 4}]"
        reuse = f"wait mte3>mte2#{3 * i - 3} " if i >= 2 else ""
        free = f" set mte3>mte2#{3 * i + 3}" if i < iterations - 2 else ""
        body += [
            f"MTE2 copy dst={ub} src={src} dims=[{N}] dst_strides=[1] src_strides=[1] | "
            f"{reuse}set mte2>vector#{3 * i + 1}",
            f"VECTOR vunary op=relu dst={ub} src={ub} dims=[{N // 2}] dst_strides=[2] "
            f"src_strides=[2] | wait mte2>vector#{3 * i + 1} set vector>mte3#{3 * i + 2}",
            f"MTE3 copy dst={dst} src={ub} dims=[{N}] dst_strides=[1] src_strides=[1] | "
            f"wait vector>mte3#{3 * i + 2}{free}",
        ]
    tensors = [("input", "x", 0, (16, N)), ("output", "y", 0x4000, (iterations, N))]
    return stream_text(tensors, "\n".join(body), ddr_size=0x4000 + iterations * N * 4)


def test_twenty_thousand_instructions_quickly():
    iterations = 7000
    x = np.random.default_rng(0).standard_normal((16, N)).astype(np.float32)
    text = pipeline(iterations)
    t0 = time.perf_counter()
    res = run_text(text, inputs={"x": x})
    elapsed = time.perf_counter() - t0
    expected = x[np.arange(iterations) % 16]
    expected[:, ::2] = np.maximum(expected[:, ::2], 0)
    np.testing.assert_array_equal(res.outputs["y"], expected)
    assert res.counters["instructions"] == 3 * iterations
    assert res.peak == {"UB": 2 * N * 4, "L1+UB": 2 * N * 4}
    assert elapsed < 30, f"{elapsed:.1f}s for {3 * iterations} instructions"
