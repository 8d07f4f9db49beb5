#!/usr/bin/env python3
"""Profiles a ResNet-18 (bf16, channels_last) whose DataLoader does real CPU work per sample, with the stock
torch.profiler (tensorboard_trace_handler, gzip, record_shapes; schedule wait 1 / warmup 2 / active 2), for
gpumeter's real-GPU check (scripts/gpu_check/run.sh).

--workers 0: the main process decodes every batch between steps, so the GPU waits on the input pipeline (a
truly input-bound job, which `gpumeter trace` must call input-bound). --workers 4 with pinned memory: the
batches are ready when the step needs them.
"""
import argparse

import torch
import torch.nn.functional as F
import torchvision


class Decoded(torch.utils.data.Dataset):
    """Stands in for JPEG decoding and augmentation: per sample, a resize and a blur on the CPU."""

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        img = torch.rand(1, 3, 320, 320, generator=g)
        img = F.interpolate(img, size=(224, 224), mode="bilinear", antialias=True)
        img = F.avg_pool2d(img, 3, stride=1, padding=1)
        return img[0], i % 1000


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--out", required=True, help="folder for the trace")
    a = p.parse_args()
    torch.set_num_threads(1)
    model = torchvision.models.resnet18().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Decoded(), batch_size=a.batch, num_workers=a.workers,
                                         pin_memory=a.workers > 0, persistent_workers=a.workers > 0)
    sched = torch.profiler.schedule(wait=1, warmup=2, active=2, repeat=1)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=True,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(a.out, use_gzip=True)) as prof:
        for i, (x, y) in enumerate(loader):
            x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
            y = y.cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()
            if i >= 6:
                break
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
