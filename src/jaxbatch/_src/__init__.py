"""jaxbatch's implementation, laid out like the engine (cc/jaxbatch) and the
data flow: data -> plan -> collate -> load -> execute -> job, with ops
(masked and broadcasting helpers), cli and base (what every layer uses).
The public names are re-exported by jaxbatch/__init__.py; nothing here is
API."""
