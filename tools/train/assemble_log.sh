#!/bin/sh
# Concatenate the logs of every training run of this session into the log kept next to the model.
out=models/kvbench-retrieval/training_log.txt
{
  echo "# kvbench-retrieval training history (UTC times in each run's first line; one core, niced, on a"
  echo "# 2-core machine shared with other jobs, so minutes are wall-clock at a fraction of a core)."
  for r in "$@"; do
    echo
    echo "## run $r"
    cat "tools/train/runs/$r/training_log.txt"
  done
} > "$out"
