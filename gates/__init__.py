"""gates: the policy engine, the built-in gates and their verdicts."""
