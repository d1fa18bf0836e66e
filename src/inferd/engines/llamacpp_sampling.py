"""A request's sampler chain for the in-process llama.cpp model (engines/llamacpp_batch.py)."""

from __future__ import annotations

import os
from typing import Any

import llama_cpp

from inferd.errors import EngineError


def sampler_chain(vocab: Any, n_vocab: int, sampling: dict[str, Any]) -> Any:
    """A sampler chain for one request, in the order llama-cpp-python's completions use (penalties,
    grammar, then greedy or top-k/typical/top-p/min-p/temperature/dist), with its defaults."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = llama_cpp.llama_sampler_chain_add
    add(chain, llama_cpp.llama_sampler_init_penalties(n_vocab, 64, 1.0, sampling["frequency_penalty"],
                                                      sampling["presence_penalty"]))
    grammar = sampling.get("grammar")
    if grammar is not None:
        compiled = llama_cpp.llama_sampler_init_grammar(vocab, grammar._grammar.encode(), grammar._root.encode())
        if not compiled:
            llama_cpp.llama_sampler_free(chain)
            raise EngineError("the response format's grammar did not compile")
        add(chain, compiled)
    temperature = sampling["temperature"]
    if temperature <= 0:
        add(chain, llama_cpp.llama_sampler_init_greedy())
    else:
        add(chain, llama_cpp.llama_sampler_init_top_k(40))
        add(chain, llama_cpp.llama_sampler_init_typical(1.0, 1))
        add(chain, llama_cpp.llama_sampler_init_top_p(sampling["top_p"], 1))
        add(chain, llama_cpp.llama_sampler_init_min_p(0.05, 1))
        add(chain, llama_cpp.llama_sampler_init_temp(temperature))
        seed = sampling.get("seed")
        add(chain, llama_cpp.llama_sampler_init_dist(
            seed & 0xFFFFFFFF if seed is not None else int.from_bytes(os.urandom(4), "little")))
    return chain
