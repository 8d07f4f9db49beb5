#!/usr/bin/python3
"""Training-loop progress layouts for the progress matrix (issue 26), printed by the real printers people use:
tqdm (python3-tqdm), rich.progress (python3-rich), and Keras-style, Hugging Face Trainer and Lightning lines.

`layouts.py --list` prints the layouts as JSON: name, the total work in the units gpumeter should report,
extra `gpumeter run` arguments and environment. `layouts.py NAME` runs one. Every step sleeps the same time
(a steady training step); evaluation and test phases are short (they are not counted as steps, so they make
the final cost a little larger than the counted work).
"""
import json
import os
import subprocess
import sys
import time

from tqdm import tqdm, trange

WORK_S = float(os.environ.get("LAYOUT_WORK_S", "9.0"))  # seconds of counted work per layout
STEPS = 180


class Pacer:
    """A training step of constant cost, dt chosen so that `steps` steps take WORK_S. The steps keep a
    timeline of their own (deadlines from the first step), as a GPU-bound step does: a step the loaded test
    machine delays is made up by the next ones, so a test run that is slow in its first half and fast in its
    second (other tests starting and ending beside it) still does its work at one steady pace."""

    def __init__(self, steps=STEPS):
        self.dt = WORK_S / steps
        self.deadline = None

    def step(self, units=1.0):
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now
        self.deadline += units * self.dt
        if self.deadline > now:
            time.sleep(self.deadline - now)


def side(p):
    """One evaluation / test step: a tenth of a training step."""
    p.step(0.1)


# ---- tqdm ------------------------------------------------------------------------------------------------


def issue_epoch_in_inner_desc():
    p = Pacer()
    for ep in trange(3, desc="epoch"):
        for _ in tqdm(range(60), desc=f"epoch {ep}", leave=False):
            p.step()


def plain_nested_no_desc():
    p = Pacer()
    for _ in trange(3):
        for _ in tqdm(range(60), leave=False):
            p.step()


def inner_leave_true():
    p = Pacer()
    for _ in trange(3, desc="epoch"):
        for _ in tqdm(range(60), desc="train"):
            p.step()


def inner_desc_epoch_of_total():
    p = Pacer()
    for ep in trange(3, desc="Epochs"):
        for _ in tqdm(range(60), desc=f"Epoch {ep + 1}/3", leave=False):
            p.step()


def outer_desc_counts_epochs():
    p = Pacer()
    bar = trange(3)
    for ep in bar:
        bar.set_description(f"epoch {ep}")
        for _ in tqdm(range(60), desc="batch", leave=False):
            p.step()


def epoch_numbers_in_both_bars():
    p = Pacer()
    bar = trange(3, desc="Epoch 1/3")
    for ep in bar:
        bar.set_description(f"Epoch {ep + 1}/3")
        for _ in tqdm(range(60), desc=f"epoch {ep + 1}", leave=False):
            p.step()


def three_deep():
    p = Pacer()
    for _ in trange(2, desc="fold"):
        for _ in trange(3, desc="epoch", leave=False):
            for _ in tqdm(range(30), desc="batch", leave=False):
                p.step()


def three_deep_positions():
    p = Pacer()
    for _ in tqdm(range(2), desc="fold", position=0):
        for _ in tqdm(range(3), desc="epoch", position=1, leave=False):
            for _ in tqdm(range(30), desc="batch", position=2, leave=True):
                p.step()


def per_epoch_bars_with_count():
    p = Pacer()
    for ep in range(3):
        for _ in tqdm(range(60), desc=f"Epoch {ep + 1}/3"):
            p.step()


def per_epoch_bars_postfix_summary():
    p = Pacer()
    for ep in range(3):
        bar = tqdm(range(60), desc=f"epoch {ep + 1}/3")
        for i in bar:
            bar.set_postfix(loss=f"{2.0 / (ep * 60 + i + 1):.4f}", acc=0.5)
            p.step()
        bar.close()
        print(f"epoch {ep + 1}/3: train_loss=0.5123 val_acc=0.81", flush=True)


def train_val_in_epochs():
    p = Pacer()
    for _ in trange(3, desc="epoch"):
        for _ in tqdm(range(60), desc="train", leave=False):
            p.step()
        for _ in tqdm(range(6), desc="val", leave=False):
            side(p)


def test_after_epochs():
    p = Pacer()
    for ep in trange(3, desc="epoch"):
        for _ in tqdm(range(60), desc=f"epoch {ep}", leave=False):
            p.step()
    for _ in tqdm(range(10), desc="test"):
        side(p)


def unknown_total():
    p = Pacer()

    def batches():
        for i in range(180):
            yield i

    for _ in tqdm(batches(), desc="train"):
        p.step()


def unknown_inner_total():
    p = Pacer()

    def batches():
        for i in range(45):
            yield i

    for _ in trange(4, desc="epoch"):
        for _ in tqdm(batches(), desc="batch"):
            p.step()


def update_by_batch_size():
    p = Pacer()
    for _ in trange(3, desc="epoch"):
        bar = tqdm(total=60 * 32, unit="samples", leave=False)
        for _ in range(60):
            p.step()
            bar.update(32)
        bar.close()


def dynamic_ncols_stdout():
    p = Pacer()
    for ep in trange(3, desc="epoch", dynamic_ncols=True, file=sys.stdout):
        for _ in tqdm(range(60), desc=f"ep{ep}", dynamic_ncols=True, leave=False, file=sys.stdout):
            p.step()


def train_stderr_eval_stdout():
    """A step bar on stderr, evaluation bars and log lines on stdout (one tracker reads both streams)."""
    p = Pacer()
    bar = tqdm(total=180, desc="train", file=sys.stderr)
    for step in range(1, 181):
        p.step()
        bar.update(1)
        if step % 45 == 0:
            for _ in tqdm(range(5), desc="eval", leave=False, file=sys.stdout):
                side(p)
            print(f"step {step}: eval_loss=0.{step}", flush=True)
    bar.close()


def _rank(rank, nested):
    p = Pacer()
    if nested:
        for _ in trange(3, desc="epoch"):
            for _ in tqdm(range(60), leave=False):
                p.step()
    else:
        for _ in tqdm(range(180), desc="train", position=rank):
            p.step()


def ranks_parallel_bars():
    """Two processes of one job, each with its own bar at its own position."""
    procs = [subprocess.Popen([sys.executable, __file__, "_rank", str(r), "flat"]) for r in range(2)]
    sys.exit(max(pr.wait() for pr in procs))


def ranks_rank0_bars_rank1_logs():
    """Rank 0 prints the bars, rank 1 log lines."""
    procs = [subprocess.Popen([sys.executable, __file__, "_rank", "0", "nested"]),
             subprocess.Popen([sys.executable, __file__, "_logs"])]
    sys.exit(max(pr.wait() for pr in procs))


def _logs():
    p = Pacer()
    for i in range(180):
        p.step()
        if i % 30 == 0:
            print(f"[rank 1] step {i} loss {1.0 / (i + 1):.3f}", flush=True)


# ---- other printers --------------------------------------------------------------------------------------


def keras_lines():
    """Keras' fit(verbose=1): "Epoch e/E", then a bar redrawn with \\r, ended with the epoch's summary."""
    p = Pacer()
    out = sys.stdout
    for ep in range(3):
        out.write(f"Epoch {ep + 1}/3\n")
        for i in range(1, 61):
            p.step()
            done = int(30 * i / 60)
            bar = "=" * (done - 1) + (">" if i < 60 else "=") + "." * (30 - done)
            if i < 60:
                out.write(f"\r{i:2d}/60 [{bar}] - ETA: {int((60 - i) * p.dt)}s - loss: {1.0 / i:.4f}")
            else:
                out.write(f"\r60/60 [{bar}] - 2s {int(p.dt * 1000)}ms/step - loss: 0.4123 - accuracy: 0.8700\n")
            out.flush()


def hf_trainer():
    """The Trainer's ProgressCallback: one bar over all steps, an evaluation bar inside it, log dicts."""
    p = Pacer()
    bar = tqdm(total=180, dynamic_ncols=True)
    for step in range(1, 181):
        p.step()
        bar.update(1)
        if step % 60 == 0:
            ev = tqdm(total=6, leave=False, dynamic_ncols=True)
            for _ in range(6):
                side(p)
                ev.update(1)
            ev.close()
            bar.write(str({"eval_loss": 0.91, "eval_runtime": 0.1, "epoch": step / 60}))
        if step % 20 == 0:
            bar.write(str({"loss": round(2.0 / step, 4), "learning_rate": 5e-05, "epoch": round(step / 60, 2)}))
    bar.close()
    print(str({"train_runtime": WORK_S, "train_samples_per_second": 30.0, "epoch": 3.0}))


def lightning():
    """Lightning's TQDMProgressBar: a sanity-check bar, one main bar reset per epoch ("Epoch e", v_num
    postfix), a validation bar under it. The number of epochs is not printed: --total-steps gives it."""
    p = Pacer()
    print("GPU available: True (cuda), used: True", flush=True)
    sanity = tqdm(total=2, desc="Sanity Checking DataLoader 0", leave=False)
    for _ in range(2):
        side(p)
        sanity.update(1)
    sanity.close()
    main = tqdm(total=60, desc="Epoch 0", position=0, dynamic_ncols=True)
    for ep in range(3):
        if ep:
            main.reset(total=60)
            main.set_description(f"Epoch {ep}")
        for i in range(60):
            p.step()
            main.update(1)
            main.set_postfix(loss=f"{1.0 / (i + 1):.3g}", v_num=0)
        val = tqdm(total=6, desc="Validation DataLoader 0", position=1, leave=False, dynamic_ncols=True)
        for _ in range(6):
            side(p)
            val.update(1)
        val.close()
    main.close()
    print("`Trainer.fit` stopped: `max_epochs=3` reached.", flush=True)


def rich_track():
    """rich.progress.track: percentages only (its default columns)."""
    from rich.progress import track

    p = Pacer()
    for _ in track(range(180), description="train", refresh_per_second=5):
        p.step()


def rich_nested_mofn():
    """rich.progress with an epoch task and a step task reset each epoch, M/N columns."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    p = Pacer()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  refresh_per_second=5) as progress:
        epochs = progress.add_task("epochs", total=3)
        steps = progress.add_task("train", total=60)
        for ep in range(3):
            progress.reset(steps, total=60, description=f"train (epoch {ep})")
            for _ in range(60):
                p.step()
                progress.advance(steps)
            progress.advance(epochs)


# ---- asynchronous bursts (issue 35) ------------------------------------------------------------------------
# PyTorch launches GPU work asynchronously: the CPU runs ahead of the GPU and waits only at a synchronisation
# (`loss.item()` when logging, `torch.cuda.synchronize()`, the caching allocator blocking). Progress reported
# after each launch then arrives in bursts: k steps a few milliseconds apart, then a pause while the GPU
# catches up. AsyncGpu is a stand-in for that GPU on the CPU: the CPU spends `launch` × the GPU time launching
# each step, the GPU takes `gpu_s` per step after the previous one, and every `sync` steps the CPU waits for it.


class AsyncGpu:
    """The CPU's and the GPU's timelines are virtual (deadlines from the start), so a loaded test machine that
    wakes the CPU late delays the reports a little but never the GPU's work: the job's pace is the stand-in
    GPU's, as a real GPU's does not depend on the CPU's load while the CPU keeps ahead of it."""

    def __init__(self, gpu_s, launch, sync):
        self.gpu_s, self.launch_s, self.sync = gpu_s, launch * gpu_s, sync
        self.cpu = self.gpu_done = time.monotonic()

    def step(self, i, gpu_s=None):
        """Launches step i (1-based); at a synchronisation step waits until the GPU has done it."""
        self.cpu += self.launch_s
        self.gpu_done = max(self.gpu_done, self.cpu) + (gpu_s or self.gpu_s)
        if i % self.sync == 0:
            self.cpu = self.gpu_done
        self._until(self.cpu)

    def wait(self):
        self._until(self.gpu_done)

    @staticmethod
    def _until(t):
        left = t - time.monotonic()
        if left > 0:
            time.sleep(left)


def _client():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import gpumeter

    return gpumeter


def _burst_loop(steps, sync, launch, report, pace=None, work_s=WORK_S):
    """`steps` steps of `work_s` seconds of GPU work in all (`pace(i)` scales step i's GPU time), a
    synchronisation every `sync` steps, progress through `report(i)` after each launch."""
    base = work_s / steps
    if pace:
        base = work_s / sum(pace(i) for i in range(1, steps + 1))
    gpu = AsyncGpu(base, launch, sync)
    for i in range(1, steps + 1):
        gpu.step(i, base * pace(i) if pace else None)
        report(i)
    gpu.wait()  # torch.cuda.synchronize() before the script ends


def _burst_client(steps, sync, launch, pace=None, work_s=WORK_S):
    gm = _client()
    _burst_loop(steps, sync, launch, lambda i: gm.progress(step=i, total_steps=steps), pace, work_s)


def _burst_tqdm(steps, sync, launch):
    bar = tqdm(total=steps, desc="train")
    _burst_loop(steps, sync, launch, lambda i: bar.update(1))
    bar.close()


def _burst_log(steps, sync, launch):
    """A Keras-style progress line per step, each on its own line (a log file)."""

    def line(i):
        done = int(30 * i / steps)
        print(f"{i}/{steps} [{'=' * done}{'.' * (30 - done)}] - loss: {1.0 / i:.4f}", flush=True)

    _burst_loop(steps, sync, launch, line)


def burst_issue_client():
    """The issue's stand-in: a synchronisation every 10 steps of 20 ms, launches about a third of the GPU
    time (a burst of 10 reports over 70 ms, then a 130 ms pause), the client every step."""
    _burst_client(450, 10, 0.35)


def burst_issue_tqdm():
    """The same through a tqdm bar updated every step."""
    _burst_tqdm(450, 10, 0.35)


def burst_client_sync3_launch90():
    _burst_client(600, 3, 0.9)


def burst_client_sync50_launch50():
    _burst_client(1000, 50, 0.5)


def burst_client_sync200_launch10():
    _burst_client(1600, 200, 0.1)


def burst_tqdm_sync100_launch30():
    _burst_tqdm(1000, 100, 0.3)


def burst_log_sync25_launch20():
    _burst_log(900, 25, 0.2)


def burst_client_pace_change():
    """The pace drops to about half after the first fifth of the steps (longer sequences, say). No forecast
    can know it before: forecasts are checked from half the work, once the window (3 s) holds the new pace."""
    _burst_client(900, 20, 0.2, pace=lambda i: 1.0 if i <= 180 else 1.9, work_s=1.4 * WORK_S)


LAYOUTS = {
    # name: (function, total work gpumeter should report, extra gpumeter run arguments, environment)
    "issue_epoch_in_inner_desc": (issue_epoch_in_inner_desc, 180, [], {}),
    "plain_nested_no_desc": (plain_nested_no_desc, 180, [], {}),
    "inner_leave_true": (inner_leave_true, 180, [], {}),
    "inner_desc_epoch_of_total": (inner_desc_epoch_of_total, 180, [], {}),
    "outer_desc_counts_epochs": (outer_desc_counts_epochs, 180, [], {}),
    "epoch_numbers_in_both_bars": (epoch_numbers_in_both_bars, 180, [], {}),
    "three_deep": (three_deep, 180, [], {}),
    "three_deep_positions": (three_deep_positions, 180, [], {}),
    "per_epoch_bars_with_count": (per_epoch_bars_with_count, 180, [], {}),
    "per_epoch_bars_postfix_summary": (per_epoch_bars_postfix_summary, 180, [], {}),
    "train_val_in_epochs": (train_val_in_epochs, 180, [], {}),
    "test_after_epochs": (test_after_epochs, 180, [], {}),
    "unknown_total": (unknown_total, 180, ["--total-steps", "180"], {}),
    "unknown_inner_total": (unknown_inner_total, 180, [], {}),
    "update_by_batch_size": (update_by_batch_size, 3 * 60 * 32, [], {}),
    "dynamic_ncols_stdout": (dynamic_ncols_stdout, 180, [], {}),
    "train_stderr_eval_stdout": (train_stderr_eval_stdout, 180, [], {}),
    "ranks_parallel_bars": (ranks_parallel_bars, 180, [], {}),
    "ranks_rank0_bars_rank1_logs": (ranks_rank0_bars_rank1_logs, 180, [], {}),
    "keras_lines": (keras_lines, 180, [], {}),
    "hf_trainer": (hf_trainer, 180, [], {}),
    "lightning": (lightning, 180, ["--total-steps", "180"], {}),
    "rich_track": (rich_track, 100, [], {"FORCE_COLOR": "1", "COLUMNS": "100"}),
    "rich_nested_mofn": (rich_nested_mofn, 180, [], {"FORCE_COLOR": "1", "COLUMNS": "100"}),
    "burst_issue_client": (burst_issue_client, 450, [], {}),
    "burst_issue_tqdm": (burst_issue_tqdm, 450, [], {}),
    "burst_client_sync3_launch90": (burst_client_sync3_launch90, 600, [], {}),
    "burst_client_sync50_launch50": (burst_client_sync50_launch50, 1000, [], {}),
    "burst_client_sync200_launch10": (burst_client_sync200_launch10, 1600, [], {}),
    "burst_tqdm_sync100_launch30": (burst_tqdm_sync100_launch30, 1000, [], {}),
    "burst_log_sync25_launch20": (burst_log_sync25_launch20, 900, [], {}),
    "burst_client_pace_change": (burst_client_pace_change, 900, [], {}),
}


# From which fraction of the work a layout's forecasts are checked (default: a quarter).
CHECK_FROM = {"burst_client_pace_change": 0.5}


def main():
    if sys.argv[1:] == ["--list"]:
        print(json.dumps([{"name": n, "total": t, "args": a, "env": e, "check_from": CHECK_FROM.get(n, 0.25)}
                          for n, (_, t, a, e) in LAYOUTS.items()]))
    elif sys.argv[1] == "_rank":
        _rank(int(sys.argv[2]), sys.argv[3] == "nested")
    elif sys.argv[1] == "_logs":
        _logs()
    else:
        LAYOUTS[sys.argv[1]][0]()


if __name__ == "__main__":
    main()
