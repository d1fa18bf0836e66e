"""The batch worker: claim a batch (a lease) -> run its lines -> record each line's result and
usage row in one transaction -> finalise. Resumable: a killed worker's lease expires and the
next worker runs only the lines still pending."""
