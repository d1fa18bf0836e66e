"""Guardrails: checks of a call's input and output that fail closed (issue 33).

``pii`` finds personal data and secrets and redacts them; ``stream`` redacts a stream chunk by
chunk with the same result. Not wired into any route yet.
"""
