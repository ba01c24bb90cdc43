"""Data: ragged columns and datasets, from arrays, Arrow and files."""
