# The job of `gpumeter demo` (embedded into the binary, written next to the run's ledger as train.py).
# With PyTorch importable: a small transformer language model trained on synthetic tokens (CPU on a machine
# without a GPU, the GPU otherwise) for 2000 steps; without PyTorch: a stand-in loop of 50 ms steps. Either
# reports through the Python client (raw datagrams when the client is missing), takes SIGTERM as "checkpoint
# at the end of this step", and would run far past the demo budget.
import json, os, signal, socket, sys, time
simulated = os.environ.get("GPUMETER_DEMO_SIMULATED") == "1"
tag = "SIMULATED " if simulated else ""
try:
    import gpumeter
    report = gpumeter.progress
except ImportError:
    _s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    def report(**kw):
        _s.sendto(json.dumps(kw).encode(), os.environ["GPUMETER_SOCKET"])
stop_requested = False
def stop(*_):
    global stop_requested
    stop_requested = True
signal.signal(signal.SIGTERM, stop)
try:
    import torch
except ImportError:
    torch = None
total, batch, seq = 2000, 8, 32
ckpt = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoint.pt")
if torch is not None:
    device = "cuda" if (not simulated and torch.cuda.is_available()) else "cpu"
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a small model: one thread is fastest, and steady on a busy machine
    vocab, d = 256, 64
    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            self.pos = torch.nn.Parameter(torch.zeros(seq, d))
            layer = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True)
            self.blocks = torch.nn.TransformerEncoder(layer, 2)
            self.head = torch.nn.Linear(d, vocab)
        def forward(self, x):
            n = x.shape[1]
            causal = torch.triu(torch.full((n, n), float("-inf"), device=x.device), 1)
            return self.head(self.blocks(self.emb(x) + self.pos[:n], mask=causal))
    model = TinyLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    params = sum(p.numel() for p in model.parameters())
    print(f"{tag}workload: PyTorch {torch.__version__} on {device}: a {params/1e6:.2f}M-parameter transformer LM, "
          f"{total} steps of {batch}x{seq} synthetic tokens", flush=True)
    def train_step():
        start = torch.randint(0, vocab, (batch, 1), device=device)
        tokens = (start + torch.arange(seq + 1, device=device)) % vocab  # learnable: next = previous + 1
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss)
else:
    print(f"{tag}workload: PyTorch is not installed: a stand-in loop of 50 ms steps", flush=True)
    t0 = time.monotonic()
    def train_step():
        deadline = t0 + step * 0.05
        while time.monotonic() < deadline:
            time.sleep(0.005)
        return 2.5 / (1 + step / 300)
for step in range(1, total + 1):
    loss = train_step()
    report(step=step, total_steps=total, samples=step * batch, tokens=step * batch * seq, metrics={"loss": loss})
    if step % 25 == 0:
        print(f"{tag}workload: step {step}/{total} loss {loss:.3f}", flush=True)
    if stop_requested:
        if torch is not None:
            torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, ckpt)
        print(f"{tag}workload: stop signal received: checkpoint of step {step} written, exiting", flush=True)
        sys.exit(0)
