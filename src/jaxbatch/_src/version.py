"""jaxbatch's release (pyproject.toml says the same), where internal modules
read it without importing the public face (jaxbatch.__version__ is it)."""

RELEASE = "0.1.0"
