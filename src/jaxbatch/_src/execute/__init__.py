"""Execution in JAX: checked and chunked vmap, jb.map, memory planning, autotuning."""
