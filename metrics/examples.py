"""Example custom metrics, importable by path from a config (see configs/demo.yaml)."""
from __future__ import annotations


def word_count(instance):
    """The seed's example: the number of space-separated words in the response."""
    response = instance["response"]
    return {"word_count": len(response.split(" ")), "characters": len(response)}

