# SPDX-License-Identifier: BSD-3-Clause
"""What the PyTorch studies (torch_fashion.py, torch_charlm.py) share: the
options every run takes, the process group, the model wrapped in DDP with
squall's comm hook (or DDP's own all-reduce for "dense"), the training
loss averaged over the ranks, and the teardown."""
import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def arguments():
    """An ArgumentParser with the options of every study run."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--codec", default="dense", help="dense (DDP's own all-reduce), or what SQUALL_COMPRESS takes")
    ap.add_argument("--ef", type=int, default=1, help="error feedback (SQUALL_EF)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup-steps", type=int, default=0,
                    help="top-k's density warm-up over this many steps (ddp_comm_hook's warmup_steps)")
    ap.add_argument("--warmup-start", type=float, default=None,
                    help="the warm-up's first density (ddp_comm_hook's warmup_start; "
                    "default squall.torch.WARMUP_START)")
    ap.add_argument("--out", required=True, help="the run's JSON (rank 0 writes it)")
    return ap


def start():
    """One thread per process (4 processes share 2 cores), gloo: (rank, world)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def ddp(module, a):
    """module in DDP, its gradients through squall's hook unless dense.
    Every call is compressed (cost model off, no size floor): on one
    machine's shared memory the cost model would pass calls through, and
    the study would measure less of the codec than it says."""
    model = DDP(module)
    if a.codec != "dense":
        import squall.torch
        state, hook = squall.torch.ddp_comm_hook(a.codec, ef=a.ef, min_bytes=0, cost_model="off",
                                                 warmup_steps=a.warmup_steps, warmup_start=a.warmup_start)
        model.register_comm_hook(state, hook)
    elif a.warmup_steps or a.warmup_start is not None:
        raise SystemExit("torch_common.py: --warmup-steps and --warmup-start are top-k's, not dense's")
    return model


def warmup(a):
    """The run's warm-up, for its JSON: {} without one."""
    if not a.warmup_steps:
        return {}
    import squall.torch
    return {"warmup_steps": a.warmup_steps,
            "warmup_start": squall.torch.WARMUP_START if a.warmup_start is None else a.warmup_start}


def mean_over_ranks(loss):
    """The training loss averaged over the ranks (a collective)."""
    lt = loss.detach().clone()
    dist.all_reduce(lt)
    return lt.item() / dist.get_world_size()


def finish():
    """Every rank waits for rank 0's report: a gloo peer that exits first
    can make rank 0's own teardown abort ("terminate called ...")."""
    dist.barrier()
    dist.destroy_process_group()
