"""Engines: one small interface (base.py), found through a registry (registry.py)."""
