"""Whole-repository properties: the README's tour, the strict tools, the layering and start-up cost."""
