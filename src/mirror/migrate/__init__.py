"""Taking over from other mirroring tools (`mirror import-mm2`)."""
