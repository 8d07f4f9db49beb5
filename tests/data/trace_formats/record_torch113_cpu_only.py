"""Records a CPU-only torch.profiler trace with the system PyTorch (Debian python3-torch 1.13, built
without Kineto: it writes the legacy bare-array chrome trace). Usage: python3 THIS OUT_DIR.
torch113_cpu_only.pt.trace.json next to this script was made with it."""
import sys

import torch
import torch.profiler as P

out_dir = sys.argv[1] if len(sys.argv) > 1 else "log"
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(32, 64)
y = torch.randn(32, 8)
with P.profile(activities=[P.ProfilerActivity.CPU], schedule=P.schedule(wait=0, warmup=1, active=3),
               on_trace_ready=P.tensorboard_trace_handler(out_dir)) as prof:
    for _ in range(4):
        opt.zero_grad()
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        prof.step()
print(torch.__version__)
