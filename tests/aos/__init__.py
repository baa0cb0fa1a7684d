"""Tests of aos: the stream format, its writer, reader, verifier and signatures."""
