"""PyTorch DistributedDataParallel on the network and step of
//distributed/strategies:comm_benchmark, for side-by-side timing (run by comm_vs_ddp.sh).

Prints one line per configuration: "<name> world <N> <ms> ms/step   cpu <ms> ms/step (sys <ms>)
faults <n>/step", where name is "none" (no communication, the compute-only baseline), "ddp"
(DDP, Gloo, the given bucket size) or "ddp_fp16" (DDP with the fp16_compress_hook); cpu is the
process's CPU time per step (sys: in the kernel) and faults its page faults per step, as
comm_benchmark prints them. --profile_dir writes torch.profiler traces of a few more steps
(benchmarks/op_table.py compares them with comm_benchmark's); --list_parameters prints the
model's parameters and buffers as comm_benchmark --list_parameters does.

--model=resnet18 trains torchvision's ResNet-18 (comm_benchmark's --model=resnet18 has the same
parameters in the same order). DDP then runs with broadcast_buffers=False: the batch-norm
buffers would otherwise be broadcast before every forward, a collective our strategies do not
issue, and the comparison is of gradient communication.
"""
import argparse
import os
import resource
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


def make_model(model):
    if model == "resnet18":
        import torchvision
        return torchvision.models.resnet18()
    return BenchNet()


def page_faults():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt + usage.ru_majflt


def sys_seconds():
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def run(rank, world, name, args, port, results, master_addr="127.0.0.1", standalone=False):
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = master_addr
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(7 + rank)
    net = make_model(args.model)
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

    def step():
        loss = (model(inputs) - targets).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for p in net.parameters():
                p.sub_(p.grad, alpha=0.01)
                p.grad.zero_()

    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            dist.barrier()
            start = time.perf_counter()
            cpu_start = time.process_time()
            faults_start = page_faults()
            sys_start = sys_seconds()
        step()
    ms = (time.perf_counter() - start) * 1000 / args.steps
    # CPU time of the process (all threads) and page faults, as comm_benchmark's columns.
    cpu_ms = (time.process_time() - cpu_start) * 1000 / args.steps
    faults = (page_faults() - faults_start) // args.steps
    sys_ms = (sys_seconds() - sys_start) * 1000 / args.steps
    if args.profile_dir:
        # As comm_benchmark's --profile_dir: a few more steps under the profiler.
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    record_shapes=True) as prof:
            for _ in range(args.profile_steps):
                step()
        prof.export_chrome_trace(
            os.path.join(args.profile_dir, f"{name}_world{world}_profile_rank{rank}.json"))
    if rank == 0:
        results.put((ms, cpu_ms, sys_ms, faults))
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
    parser.add_argument("--profile_dir", default="",
                        help="non-empty: --profile_steps more steps under torch.profiler, "
                        "written as <dir>/<config>_world<N>_profile_rank<k>.json")
    parser.add_argument("--profile_steps", type=int, default=2)
    parser.add_argument("--list_parameters", action="store_true",
                        help="print the parameters and buffers (name, shape) and exit, as "
                        "comm_benchmark --list_parameters")
    args = parser.parse_args()
    if args.list_parameters:
        net = make_model(args.model)
        for name, p in net.named_parameters():
            print(f"parameter {name} [{', '.join(map(str, p.shape))}]")
        for name, b in net.named_buffers():
            print(f"buffer {name} [{', '.join(map(str, b.shape))}]")
        print(f"parameter elements {sum(p.numel() for p in net.parameters())}")
        return
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
                    ms, cpu_ms, sys_ms, faults = results.get()
                    print(f"{name:<14} world {args.world} {ms:9.1f} ms/step   cpu {cpu_ms:.1f} "
                          f"ms/step (sys {sys_ms:.1f})   faults {faults}/step", flush=True)
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
                ms, cpu_ms, sys_ms, faults = results.get(timeout=600)
                for p in procs:
                    p.join(timeout=60)
                print(f"{name:<14} world {world} {ms:9.1f} ms/step   cpu {cpu_ms:.1f} ms/step "
                      f"(sys {sys_ms:.1f})   faults {faults}/step", flush=True)


if __name__ == "__main__":
    main()
