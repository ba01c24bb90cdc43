"""The main demo: a real sentence-embedding job (all-MiniLM-L6-v2 in JAX) run
through jaxbatch on a real corpus, against the usual hand-written way."""
