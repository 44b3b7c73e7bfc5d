"""The A/B driver (`optbench ab`), one job per module: driver (the run, step by step), options (the
input and its checks), worktree (the base commit checked out, base's optbench installed), sessions
(the two pytest sessions, their connection and processes), schedule (who runs what when), lockstep
(the plugin inside each session), pooling (the rows, pooled and paired), outcome (verdicts, gate.md
and gate.json), confirmation (a flagged regression measured again). No torch."""
