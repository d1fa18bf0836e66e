"""What operators see: metrics, request ids, logs."""
