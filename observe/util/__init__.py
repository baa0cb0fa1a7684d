"""Small utilities shared by the recorder and the read side: atomic writes, the allocator, a thread probe."""
