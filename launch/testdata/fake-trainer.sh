#!/bin/sh
# A stand-in trainer that behaves like a DeepSpeed job under replan's
# contract: resumes from $REPLAN_CHECKPOINT_DIR/latest when REPLAN_RESUME=1,
# prints DeepSpeed ThroughputTimer lines, and on SIGTERM saves the iteration
# it reached to the checkpoint marker and exits 0.
ckpt="$REPLAN_CHECKPOINT_DIR"
it=0
if [ "$REPLAN_RESUME" = 1 ] && [ -f "$ckpt/latest" ]; then it=$(cat "$ckpt/latest"); fi
echo "resumed at $it"
trap 'echo "$it" > "$ckpt/latest.tmp" && mv "$ckpt/latest.tmp" "$ckpt/latest"; echo "saved $it"; exit 0' TERM
while :; do
	it=$((it + 1))
	echo "[Rank 0] epoch=0/micro_step=$it/global_step=$it, RunningAvgSamplesPerSec=10.0, CurrSamplesPerSec=10.0"
	sleep 0.02
done
