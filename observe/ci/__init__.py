"""What CI systems read: step folding, job outputs, summaries, annotations."""
