"""The jaxbatch command line: plan, run and demo."""
