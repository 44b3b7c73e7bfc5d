"""`optbench report` and `optbench publish`: Markdown, a self-contained HTML page with plots, a
recommendation per model and device, and comparisons across runs, from result files only (no torch)."""
