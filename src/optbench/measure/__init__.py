"""How ONE case is measured: timing, inference / training / data modes, accuracy, costs, the
machine's ceilings. Torch; no pytest, no files."""
