"""File ingestion for conversations: extract text, chunk it, embed the chunks, store the vectors."""
