"""evalbeam's Beam pieces: read, validate, score, summarize, write."""
