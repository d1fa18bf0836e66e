"""Services that call the corridor from inside: chat, and later conversations and batches."""
