"""The recorder: spawn the command, capture its output, serve its channel, sample devices, write the stream."""
