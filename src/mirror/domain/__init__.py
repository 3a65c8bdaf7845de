"""Pure domain logic: naming, topic matching, routes, acknowledgements, the offset map, lag math,
Burrow-style status, runbooks. No I/O; imports no client library, no CLI, no YAML."""
