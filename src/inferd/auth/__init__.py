"""Who is calling: key minting, hashing and parsing; the principal of a request."""
