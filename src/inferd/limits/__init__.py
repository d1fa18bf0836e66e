"""Requests-per-minute limits and monthly spend: one-process and many-replica implementations."""
