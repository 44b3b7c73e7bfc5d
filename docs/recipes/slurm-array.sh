#!/bin/bash
# The benchmark matrix split over the 3 tasks of a Slurm job array, then merged into one run.
#
# From the root of your optbench checkout, with its venv made (python3 -m venv .venv &&
# .venv/bin/pip install -e ".[compression]"; set OPTBENCH_VENV=DIR for a venv elsewhere):
#
#   bash docs/recipes/slurm-array.sh      # submits the array, and a merge that waits for all of it
#   sbatch docs/recipes/slurm-array.sh    # the array only; merge by hand when it is done:
#       .venv/bin/optbench merge results/runs/slurm-JOBID-* --out results/runs/slurm-JOBID
#
# Task I of --array=0-2 runs part I+1 of 3: the plugin reads SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN
# and SLURM_ARRAY_TASK_COUNT, so no --shard is given. To split differently, change the range A-B only.
# The #SBATCH lines below are placeholders for your cluster (add e.g. --partition, --gres=gpu:1).
# Linted by tests/test_recipes.py (bash -n, shellcheck, and a run with stub sbatch, pytest and optbench).
#
#SBATCH --job-name=optbench-shard
#SBATCH --array=0-2
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --exclusive
#SBATCH --time=04:00:00
#SBATCH --output=slurm-optbench-%A_%a.out
# --exclusive: another job on the node would load it and skew every latency measured there.
set -euo pipefail

if [[ -z "${SLURM_ARRAY_TASK_ID:-}" ]]; then
    # Not an array task: submit the array, then the merge. afterany: the merge also runs when a shard
    # failed, and then names the missing part in one line.
    if [[ ! -d bench ]]; then
        echo "run this from the root of the optbench checkout (no bench/ here)" >&2
        exit 2
    fi
    job=$(sbatch --parsable "${BASH_SOURCE[0]}")
    job=${job%%;*} # --parsable prints "JOBID;CLUSTER" on a multi-cluster setup
    optbench="${OPTBENCH_VENV:-$PWD/.venv}/bin/optbench"
    sbatch --dependency="afterany:${job}" --job-name=optbench-merge \
        --output="slurm-optbench-${job}-merge.out" \
        --wrap="'${optbench}' merge results/runs/slurm-${job}-* --out results/runs/slurm-${job}"
    echo "submitted array job ${job}; the merged run will be results/runs/slurm-${job}"
    exit 0
fi

# An array task, run in the checkout (the folder sbatch was called from) with the checkout's venv.
cd "${SLURM_SUBMIT_DIR:-.}"
export PATH="${OPTBENCH_VENV:-$PWD/.venv}/bin:$PATH"
# Each task caches its trained checkpoints in its own folder: tasks on different nodes sharing one
# home directory could write the same temporary file name.
export OPTBENCH_CACHE="${OPTBENCH_CACHE:-$HOME/.cache/optbench}/task-${SLURM_ARRAY_TASK_ID}"
# The array's job id in the run id: a resubmitted array writes new run folders beside the old ones.
exec pytest bench/ --run-id "slurm-${SLURM_ARRAY_JOB_ID}-${SLURM_ARRAY_TASK_ID}"
