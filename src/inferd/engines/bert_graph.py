"""The BERT encoder (Hugging Face BertModel's forward pass, inference only) as an ONNX graph,
built in memory from safetensors weights, so onnxruntime runs it without torch or an export step.

onnxruntime fuses the attention, GELU and layer-norm patterns below into its own kernels, which
is where the speed over a numpy forward pass comes from (one fused kernel instead of a dozen
passes over memory per layer). Everything stays float32 with the exact (erf) GELU, so the
vectors agree with sentence-transformers to within float rounding.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_OPSET = 17  # LayerNormalization is a standard op from 17 on


class _Graph:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs: object) -> str:
        self._count += 1
        out = f"{op_type.lower()}_{self._count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out


def build_bert_graph(get: Callable[[str], np.ndarray], layers: int, heads: int, hidden: int,
                     eps: float) -> bytes:
    """The serialized ONNX model: inputs input_ids, token_type_ids, position_ids (int64) and
    mask_bias (float32, [batch, 1, 1, length]: 0 for tokens, a large negative for padding);
    output `hidden` [batch, length, hidden]."""
    g = _Graph()
    size = hidden // heads
    shape_qkv = g.const("shape_qkv", np.array([0, 0, 3, heads, size], dtype=np.int64))
    shape_ctx = g.const("shape_ctx", np.array([0, 0, hidden], dtype=np.int64))
    scale = g.const("scale", np.array(1.0 / math.sqrt(size), dtype=np.float32))
    half = g.const("half", np.array(0.5, dtype=np.float32))
    one = g.const("one", np.array(1.0, dtype=np.float32))
    inv_sqrt2 = g.const("inv_sqrt2", np.array(1.0 / math.sqrt(2.0), dtype=np.float32))
    index = {i: g.const(f"idx{i}", np.array(i, dtype=np.int64)) for i in range(3)}

    def w(name: str, transpose: bool = False) -> str:
        value = get(name)
        return g.const(name, np.ascontiguousarray(value.T if transpose else value))

    def layer_norm(x: str, prefix: str) -> str:
        return g.op("LayerNormalization", x, w(prefix + ".weight"), w(prefix + ".bias"), axis=-1, epsilon=eps)

    x = g.op("Add", g.op("Gather", w("embeddings.word_embeddings.weight"), "input_ids"),
             g.op("Gather", w("embeddings.position_embeddings.weight"), "position_ids"))
    x = g.op("Add", x, g.op("Gather", w("embeddings.token_type_embeddings.weight"), "token_type_ids"))
    x = layer_norm(x, "embeddings.LayerNorm")
    for i in range(layers):
        base = f"encoder.layer.{i}."
        qkv_w = g.const(base + "qkv.weight", np.ascontiguousarray(np.concatenate(
            [get(base + f"attention.self.{n}.weight").T for n in ("query", "key", "value")], axis=1)))
        qkv_b = g.const(base + "qkv.bias", np.concatenate(
            [get(base + f"attention.self.{n}.bias") for n in ("query", "key", "value")]))
        qkv = g.op("Add", g.op("MatMul", x, qkv_w), qkv_b)
        qkv = g.op("Transpose", g.op("Reshape", qkv, shape_qkv), perm=[2, 0, 3, 1, 4])
        q, k, v = (g.op("Gather", qkv, index[j], axis=0) for j in range(3))
        scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), scale)
        probs = g.op("Softmax", g.op("Add", scores, "mask_bias"), axis=-1)
        context = g.op("Reshape", g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3]), shape_ctx)
        attention = g.op("Add", g.op("MatMul", context, w(base + "attention.output.dense.weight", True)),
                         w(base + "attention.output.dense.bias"))
        x = layer_norm(g.op("Add", x, attention), base + "attention.output.LayerNorm")
        inner = g.op("Add", g.op("MatMul", x, w(base + "intermediate.dense.weight", True)),
                     w(base + "intermediate.dense.bias"))
        # GELU, the exact form BERT was trained with: 0.5 x (1 + erf(x / sqrt 2)).
        gelu = g.op("Mul", g.op("Mul", inner, half), g.op("Add", g.op("Erf", g.op("Mul", inner, inv_sqrt2)), one))
        out = g.op("Add", g.op("MatMul", gelu, w(base + "output.dense.weight", True)), w(base + "output.dense.bias"))
        x = layer_norm(g.op("Add", x, out), base + "output.LayerNorm")
    g.nodes.append(helper.make_node("Identity", [x], ["hidden"]))
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "length"])
            for n in ("input_ids", "token_type_ids")]
    inputs = [*ints, helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "length"]),
              helper.make_tensor_value_info("mask_bias", TensorProto.FLOAT, ["batch", 1, 1, "length"])]
    output = helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "length", hidden])
    graph = helper.make_graph(g.nodes, "bert", inputs, [output], initializer=g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="inferd")
    return model.SerializeToString()
