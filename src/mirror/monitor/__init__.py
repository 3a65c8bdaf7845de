"""`mirror monitor`: lag gathered from the clusters (`gather`, one observation per call) in the
background and served as Prometheus metrics (`exporter`)."""
