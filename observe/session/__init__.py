"""Fleet sessions: node recorders that seal their own streams, and one session that commits to them all."""
