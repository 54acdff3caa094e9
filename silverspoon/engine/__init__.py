"""Engine: params -> stored answers (data files, model backends, the generation store, provenance)."""
