"""Integrations: Hugging Face datasets as a source, Grain pipelines and Orbax checkpoints,
each importing its optional dependency lazily."""
