"""Tests of gates: the gate language, the policy engine, the built-in gates and their mutants."""
