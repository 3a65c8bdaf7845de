"""`mirror monitor`: lag gathered from the clusters (`gather`), exported at scrape time (`exporter`)."""
