"""The regression gate: a candidate run against a baseline, case by case and metric by metric, with
statistics that survive noisy machines. Reads result files only: no torch."""
