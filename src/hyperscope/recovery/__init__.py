"""Recovery: what the agent decides about sick nodes and stuck jobs (as data), and the progress
signals (heartbeats) it decides from."""
