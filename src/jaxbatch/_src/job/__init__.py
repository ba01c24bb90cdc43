"""Jobs: resumable, exactly-once runs of jb.map with their folder, journal and output."""
