"""In-process capture: annotations, the torch backend, the system sampler, the writer and the session."""
