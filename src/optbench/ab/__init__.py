"""The A/B driver (`optbench ab`): git worktrees, the two pytest sessions in lockstep, pooling their
rows, and the gate's outcome. No torch."""
