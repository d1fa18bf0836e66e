"""What operators see: metrics, request ids, logs (CONTRACT.md decision 18)."""
