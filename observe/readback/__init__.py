"""Reading streams back for people and scripts: events, raw output, artifacts, summaries, tail."""
