"""The training loop of train-buckets.yaml: sums the dataset's numbers a step at a time, with a checkpoint
every 2 steps in $SKYHIVE_CHECKPOINT_DIR (the job's folder on the checkpoint bucket), resuming from the
newest one. Each checkpoint is written to a temporary name and renamed, so no half-written file is uploaded.
"""

import json
import os
import re
from pathlib import Path

ckpt = Path(os.environ["SKYHIVE_CHECKPOINT_DIR"]).expanduser()
ckpt.mkdir(parents=True, exist_ok=True)
data = Path("~/skyhive-example/data").expanduser()
numbers = [float(x) for f in sorted(data.iterdir()) for x in f.read_text().split()]
steps = int(os.environ.get("STEPS", "6"))

done = sorted(int(m.group(1)) for p in ckpt.iterdir() if (m := re.fullmatch(r"step-(\d+)\.json", p.name)))
state = json.loads((ckpt / f"step-{done[-1]}.json").read_text()) if done else {"step": 0, "total": 0.0}
print(f"resuming from step {state['step']}" if done else "starting from scratch", flush=True)
end = state["step"] + steps
while state["step"] < end:
    state["step"] += 1
    state["total"] += sum(numbers) * state["step"]
    print(f"step {state['step']} total {state['total']:g}", flush=True)
    if state["step"] % 2 == 0:
        tmp = ckpt / f"step-{state['step']}.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.rename(ckpt / f"step-{state['step']}.json")
