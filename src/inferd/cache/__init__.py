"""The response cache: a call whose answer is already stored is answered from the store, for the
tenant that stored it only, and billed as a hit (no engine, no tokens against tpm or budgets)."""
