"""Taking over from other mirroring tools (`mirror import-mm2`): `mm2` reads MirrorMaker 2's
progress records and writes them as this project's group offsets and offset map."""
