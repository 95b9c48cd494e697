"""Single-node glue-op models at decoder shapes, for `rcpu-bench compare MODEL` (e2e/BENCH.md).

    .venv/bin/python scripts/glue_models.py /tmp/glue      # writes /tmp/glue/<name>.onnx, prints the names

Every model has fixed shapes (no symbolic dims) and f32 inputs; constant operands (scales, biases,
broadcast rows) are initializers, as in an exported decoder. Names say op and shape, e.g.
`sigmoid_128x4864`, `softmax_14x1x257`, `skipsln_128x896`.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


def model(name, node, inputs, inits, out_shape, opset=21):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    g = helper.make_graph([node], name, ins, [out], [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    m.ir_version = 10
    return m


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def all_models():
    rows = (1, 128)
    for r in rows:
        for w in (896, 4864, 8192):
            s = [r, w]
            yield f"sigmoid_{r}x{w}", model("m", helper.make_node("Sigmoid", ["x"], ["y"]), [("x", s)], {}, s)
            yield f"gelu_{r}x{w}", model("m", helper.make_node("Gelu", ["x"], ["y"]), [("x", s)], {}, s)
            yield f"msgelu_{r}x{w}", model("m", helper.make_node("Gelu", ["x"], ["y"], domain=MS), [("x", s)], {}, s)
            yield f"fastgelu_{r}x{w}", model(
                "m", helper.make_node("FastGelu", ["x", "b"], ["y"], domain=MS), [("x", s)], {"b": rnd(w, seed=1)}, s
            )
            yield f"mul_{r}x{w}", model("m", helper.make_node("Mul", ["x", "z"], ["y"]), [("x", s), ("z", s)], {}, s)
        for w in (896, 2048):
            s = [r, w]
            sc, b = rnd(w, seed=2) * 0.1 + 1, rnd(w, seed=3) * 0.1
            yield f"ln_{r}x{w}", model(
                "m",
                helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5),
                [("x", s)],
                {"s": sc, "b": b},
                s,
            )
            yield f"sln_{r}x{w}", model(
                "m",
                helper.make_node("SimplifiedLayerNormalization", ["x", "s"], ["y"], axis=-1, epsilon=1e-6),
                [("x", s)],
                {"s": sc},
                s,
            )
            yield f"skipsln_{r}x{w}", model(
                "m",
                helper.make_node("SkipSimplifiedLayerNormalization", ["x", "k", "s"], ["y"], domain=MS, epsilon=1e-6),
                [("x", s), ("k", s)],
                {"s": sc},
                s,
            )
            yield f"addrow_{r}x{w}", model(
                "m", helper.make_node("Add", ["x", "b"], ["y"]), [("x", s)], {"b": b}, s
            )
    # Attention probabilities: [heads, queries, keys] (decode: 1 query over past+1 keys; prefill).
    for s in ([14, 1, 257], [14, 1, 1025], [32, 1, 257], [14, 128, 128], [14, 128, 384]):
        name = "softmax_" + "x".join(map(str, s))
        yield name, model("m", helper.make_node("Softmax", ["x"], ["y"], axis=-1), [("x", s)], {}, s)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/glue"
    os.makedirs(out, exist_ok=True)
    for name, m in all_models():
        if not name.startswith("sln_"):  # ORT's contrib schema in the ONNX domain: unknown to onnx
            onnx.checker.check_model(m)
        onnx.save(m, os.path.join(out, name + ".onnx"))
        print(name)


if __name__ == "__main__":
    main()
