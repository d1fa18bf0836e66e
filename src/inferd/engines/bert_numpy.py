"""A BERT encoder in numpy (the forward pass of Hugging Face's BertModel, inference only),
with sentence-transformers pooling and normalisation read from the model folder."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

# Abramowitz & Stegun 7.1.26: erf to within 1.5e-7, so GELU matches the exact (erf) form that
# BERT was trained with far below the 1e-5 the embeddings are held to (numpy has no erf).
_P, _A = 0.3275911, (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _gelu(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + erf(x / sqrt 2)), with erf(|z|) = 1 - poly(t) exp(-z^2) and few temporaries."""
    z = np.abs(x)
    z *= np.float32(1.0 / math.sqrt(2.0))
    t = z * np.float32(_P)
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    poly = t * np.float32(_A[4])
    for coefficient in (_A[3], _A[2], _A[1], _A[0]):
        poly += np.float32(coefficient)
        poly *= t
    z *= z
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # now erfc(|x| / sqrt 2)
    poly *= np.float32(0.5)
    poly *= x  # x * erfc / 2: the GELU of negative x
    return np.where(x >= 0, x - poly, poly)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + eps) * weight + bias


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


class BertEncoder:
    """Texts in, pooled (and normalised) sentence vectors out."""

    def __init__(self, folder: Path) -> None:
        config = _read_json(folder / "config.json")
        self.hidden_size = int(config["hidden_size"])
        self._heads = int(config["num_attention_heads"])
        self._eps = float(config.get("layer_norm_eps", 1e-12))
        layers = int(config["num_hidden_layers"])
        pooling = _read_json(folder / "1_Pooling" / "config.json")
        self._pool_cls = bool(pooling.get("pooling_mode_cls_token"))
        modules = json.loads((folder / "modules.json").read_text()) if (folder / "modules.json").exists() else []
        self._normalize = any(m.get("type", "").endswith("Normalize") for m in modules)
        max_length = int(_read_json(folder / "sentence_bert_config.json").get("max_seq_length", 512))
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length)
        self._tokenizer.enable_padding(pad_id=int(config.get("pad_token_id", 0)))
        w = load_file(str(folder / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""

        def get(name: str) -> np.ndarray:
            return np.ascontiguousarray(w[prefix + name], dtype=np.float32)

        self._word = get("embeddings.word_embeddings.weight")
        self._position = get("embeddings.position_embeddings.weight")
        self._token_type = get("embeddings.token_type_embeddings.weight")
        self._embed_norm = (get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"))
        self._layers = []
        for i in range(layers):
            base = f"encoder.layer.{i}."
            # Query, key and value in one matrix: one matmul instead of three.
            qkv_w = np.concatenate([get(base + f"attention.self.{n}.weight").T for n in ("query", "key", "value")],
                                   axis=1)
            qkv_b = np.concatenate([get(base + f"attention.self.{n}.bias") for n in ("query", "key", "value")])
            self._layers.append((
                np.ascontiguousarray(qkv_w), qkv_b,
                np.ascontiguousarray(get(base + "attention.output.dense.weight").T),
                get(base + "attention.output.dense.bias"),
                (get(base + "attention.output.LayerNorm.weight"), get(base + "attention.output.LayerNorm.bias")),
                np.ascontiguousarray(get(base + "intermediate.dense.weight").T), get(base + "intermediate.dense.bias"),
                np.ascontiguousarray(get(base + "output.dense.weight").T), get(base + "output.dense.bias"),
                (get(base + "output.LayerNorm.weight"), get(base + "output.LayerNorm.bias")),
            ))

    def _forward(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        batch, length = ids.shape
        heads, size = self._heads, self.hidden_size // self._heads
        x = self._word[ids] + self._position[:length][None, :, :] + self._token_type[types]
        # Dense layers work on (batch * length, hidden): one large GEMM each, not one per sentence.
        x = _layer_norm(x, *self._embed_norm, self._eps).reshape(batch * length, self.hidden_size)
        bias = ((1.0 - mask[:, None, None, :]) * np.finfo(np.float32).min).astype(np.float32)
        scale = np.float32(1.0 / math.sqrt(size))
        for qkv_w, qkv_b, out_w, out_b, norm1, in_w, in_b, ff_w, ff_b, norm2 in self._layers:
            qkv = (x @ qkv_w + qkv_b).reshape(batch, length, 3, heads, size).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch * length, self.hidden_size)
            x = _layer_norm(x + context @ out_w + out_b, *norm1, self._eps)
            x = _layer_norm(x + _gelu(x @ in_w + in_b) @ ff_w + ff_b, *norm2, self._eps)
        return x.reshape(batch, length, self.hidden_size)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """Sentence vectors (n, hidden) and each text's token count, texts of similar length batched."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = np.empty((len(texts), self.hidden_size), dtype=np.float32)
        counts = [0] * len(texts)
        for start in range(0, len(order), 64):
            chunk = order[start:start + 64]
            encodings = self._tokenizer.encode_batch([texts[i] for i in chunk])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            types = np.array([e.type_ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
            hidden = self._forward(ids, types, mask)
            if self._pool_cls:
                pooled = hidden[:, 0]
            else:
                pooled = (hidden * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
            if self._normalize:
                pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            for row, i in enumerate(chunk):
                vectors[i] = pooled[row]
                counts[i] = int(mask[row].sum())
        return vectors, counts
