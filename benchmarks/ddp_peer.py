"""PyTorch DistributedDataParallel on the network and step of
//distributed/strategies:comm_benchmark, for side-by-side timing (run by comm_vs_ddp.sh).

Prints one line per configuration: "<name> world <N> <ms> ms/step", where name is
"none" (no communication, the compute-only baseline), "ddp" (DDP, Gloo, the given bucket
size) or "ddp_fp16" (DDP with the fp16_compress_hook).

--model=resnet18 trains torchvision's ResNet-18 (comm_benchmark's --model=resnet18 has the same
parameters in the same order). DDP then runs with broadcast_buffers=False: the batch-norm
buffers would otherwise be broadcast before every forward, a collective our strategies do not
issue, and the comparison is of gradient communication.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class BenchNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1)
        self.conv2 = nn.Conv2d(64, 128, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(128, 256, 3, stride=2, padding=1)
        self.conv4 = nn.Conv2d(256, 256, 3, padding=1)
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h))
        h = F.relu(self.conv3(h))
        h = F.relu(self.conv4(h))
        return self.fc(h.mean(dim=(2, 3)))


def run(rank, world, name, args, port, results, master_addr="127.0.0.1", standalone=False):
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = master_addr
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(7 + rank)
    if args.model == "resnet18":
        import torchvision
        net = torchvision.models.resnet18()
    else:
        net = BenchNet()
    classes = net.fc.out_features
    model = net
    if name.startswith("ddp"):
        model = nn.parallel.DistributedDataParallel(
            net, bucket_cap_mb=args.bucket_cap_mb,
            broadcast_buffers=args.model != "resnet18")
        if name == "ddp_fp16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            model.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    inputs = torch.randn(args.batch, 3, args.image_size, args.image_size)
    targets = torch.randn(args.batch, classes)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
            cpu_start = time.process_time()
        loss = (model(inputs) - targets).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for p in net.parameters():
                p.sub_(p.grad, alpha=0.01)
                p.grad.zero_()
    ms = (time.perf_counter() - start) * 1000 / args.steps
    # CPU time of the process (all threads), as comm_benchmark's "cpu" column.
    cpu_ms = (time.process_time() - cpu_start) * 1000 / args.steps
    if rank == 0:
        results.put((ms, cpu_ms))
    if standalone:
        dist.destroy_process_group()
        return
    # A spawned worker leaves without running destructors: LibTorch 1.13's DDP teardown can
    # deadlock (~Reducer joins a Gloo thread that waits for the GIL), which once hung a run here.
    dist.barrier()
    results.close()
    results.join_thread()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="small", choices=["small", "resnet18"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image_size", type=int, default=32)
    parser.add_argument("--bucket_cap_mb", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--worlds", default="1,2", help="world sizes to run, e.g. 2")
    parser.add_argument("--configs", default="none,ddp,ddp_fp16")
    # One rank of a job started separately (one per network namespace, say); the network
    # interface comes from GLOO_SOCKET_IFNAME as in any PyTorch job.
    parser.add_argument("--rank", type=int, default=-1)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--master_addr", default="127.0.0.1")
    parser.add_argument("--master_port", type=int, default=29700)
    args = parser.parse_args()
    configs = [c for c in args.configs.split(",") if c]
    if args.rank >= 0:
        port = args.master_port
        for _ in range(args.repeats):
            for name in configs:
                results = mp.get_context("spawn").Queue()
                run(args.rank, args.world, name, args, port, results, args.master_addr,
                    standalone=True)
                port += 1
                if args.rank == 0:
                    ms, cpu_ms = results.get()
                    print(f"{name:<14} world {args.world} {ms:9.1f} ms/step   cpu {cpu_ms:.1f} "
                          f"ms/step", flush=True)
        return
    ctx = mp.get_context("spawn")
    port = 29700
    for _ in range(args.repeats):
        for world in [int(w) for w in args.worlds.split(",")]:
            for name in configs:
                port += 1
                results = ctx.Queue()
                procs = [ctx.Process(target=run, args=(r, world, name, args, port, results))
                         for r in range(world)]
                for p in procs:
                    p.start()
                ms, cpu_ms = results.get(timeout=600)
                for p in procs:
                    p.join(timeout=60)
                print(f"{name:<14} world {world} {ms:9.1f} ms/step   cpu {cpu_ms:.1f} ms/step",
                      flush=True)


if __name__ == "__main__":
    main()
