"""Collation: planned batches into padded or packed arrays."""
