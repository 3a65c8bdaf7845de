"""`mirror monitor`: lag gathered from the clusters (`gather`) in the background and exported (`exporter`)."""
