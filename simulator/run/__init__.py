"""What a run of many steps costs beyond its steps (issue 60): interruptions, restarts and
checkpoints (goodput.py). Each takes a plan's step time, layout and model and returns the
run's totals; the step model is not touched."""
