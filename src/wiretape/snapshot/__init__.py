"""Snapshots of the agent's trees: taken before recording, restored into a
sandbox before each replay, and compared after the agent ran (the outcome)."""
