"""A sentence-transformers BERT encoder: the `tokenizers` package, Hugging Face BertModel's forward
pass as an onnxruntime graph built from the safetensors weights (engines/bert_graph.py), and the
pooling and normalisation the model folder's configs ask for. No torch, no export step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from inferd.engines.bert_graph import build_bert_graph


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


class BertEncoder:
    """Texts in, pooled (and normalised) sentence vectors out."""

    def __init__(self, folder: Path, threads: int = 0) -> None:
        """`threads` 0 lets onnxruntime use every core."""
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

        graph = build_bert_graph(get, layers, self._heads, self.hidden_size, self._eps)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle pool threads sleep instead of spinning: they share the cores with the event loop.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])

    def _forward(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Hidden states (batch, length, hidden) for padded token ids."""
        bias = ((1.0 - mask[:, None, None, :]) * np.float32(-1e9)).astype(np.float32)
        positions = np.arange(ids.shape[1], dtype=np.int64)[None, :]
        return self._session.run(["hidden"], {"input_ids": ids, "token_type_ids": types,  # type: ignore[no-any-return]
                                              "position_ids": positions, "mask_bias": bias})[0]

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
