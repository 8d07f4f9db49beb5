"""A job with a known learning curve for the --target tests (TargetIntegrationTest): STEPS steps of
STEP_S seconds; every EVERY steps it reports METRIC = curve(step) + Gaussian noise through the client.
On SIGTERM it writes a checkpoint file and exits 0 (the graceful stop gpumeter asks for).

usage: target_curve.py KIND STEPS STEP_S EVERY NOISE SEED CHECKPOINT_PATH
KIND: power (loss = 2.0 + 3/sqrt(step+20)), exp (acc = 0.9 - 0.8·e^(-step/(0.3·STEPS)))."""
import math
import random
import signal
import sys
import time

import gpumeter

kind, steps, step_s, every, noise, seed, checkpoint = sys.argv[1:8]
steps, step_s, every, noise, seed = int(steps), float(step_s), int(every), float(noise), int(seed)
rng = random.Random(seed)
stop = False


def on_term(signum, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)


def curve(step):
    if kind == "power":
        return 2.0 + 3.0 / math.sqrt(step + 20)
    return 0.9 - 0.8 * math.exp(-step / (0.3 * steps))


metric = "loss" if kind == "power" else "acc"
start = time.monotonic()
for step in range(1, steps + 1):
    # Steps on a fixed grid of wall time, so the pace is known whatever the machine's load.
    time.sleep(max(0.0, start + step * step_s - time.monotonic()))
    metrics = {metric: curve(step) + rng.gauss(0, noise)} if step % every == 0 else None
    gpumeter.progress(step=step, total_steps=steps, metrics=metrics)
    if stop:
        with open(checkpoint, "w") as f:
            f.write("step %d\n" % step)
        gpumeter.checkpoint(checkpoint)
        print("stopped at step %d of %d, checkpoint written" % (step, steps), flush=True)
        sys.exit(0)
print("done: %d steps" % steps, flush=True)
