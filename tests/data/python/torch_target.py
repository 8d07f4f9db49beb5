"""A real PyTorch loop (CPU is fine) for `gpumeter run --target` (docs/run.md "Targets"): a small MLP fits
y = sin(3x)·x on synthetic data; every 10 steps it evaluates on held-out points and reports `val_loss`
through the client. On SIGTERM it saves a checkpoint with torch.save and exits.

usage: torch_target.py [STEPS] [CHECKPOINT]"""
import signal
import sys

import torch

import gpumeter

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 600
checkpoint = sys.argv[2] if len(sys.argv) > 2 else "torch_target.pt"
torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.rand(4096, 1) * 4 - 2
y = torch.sin(3 * x) * x + 0.05 * torch.randn_like(x)
x_val = torch.linspace(-2, 2, 512).unsqueeze(1)
y_val = torch.sin(3 * x_val) * x_val
model = torch.nn.Sequential(torch.nn.Linear(1, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                            torch.nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
stop = False


def on_term(signum, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
for step in range(1, steps + 1):
    idx = torch.randint(0, x.shape[0], (256,))
    loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    metrics = None
    if step % 10 == 0:
        with torch.no_grad():
            metrics = {"val_loss": torch.nn.functional.mse_loss(model(x_val), y_val)}
    gpumeter.progress(step=step, total_steps=steps, metrics=metrics)
    if stop:
        torch.save(model.state_dict(), checkpoint)
        gpumeter.checkpoint(checkpoint)
        print("stopped at step %d: checkpoint %s" % (step, checkpoint), flush=True)
        sys.exit(0)
print("done: %d steps, val_loss %.4f" % (steps, float(metrics["val_loss"]) if metrics else float("nan")), flush=True)
