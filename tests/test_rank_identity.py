"""Whose line is it: launcher prefixes are stripped before settings are read, and the rank a line speaks for is the
global one (torchrun's [defaultN] is the local rank)."""
import pytest

from parsers.scan.base import rank_of, strip_prefixes

ARGS = ("------------------------ arguments ------------------------\n"
        "  micro_batch_size ................................ 4\n"
        "  tensor_model_parallel_size ...................... 8\n")
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
       "79.11 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. "
       "Of the allocated memory 74.10 GiB is allocated by PyTorch, and 0.31 GiB is reserved by PyTorch but unallocated.")


@pytest.mark.parametrize("line, rank", [
    ("1: [default3]:[rank11]: RuntimeError: boom", 11),             # srun -l + torchrun: the global rank
    ("[default3]:[rank11]: RuntimeError: boom", 11),
    ("1: [default3]: RuntimeError: boom", None),                    # node label + local rank only: unknown
    ("[node041:2]:[default2]: RuntimeError: boom", None),
    ("[default3]: RuntimeError: boom", 3),                           # one node: local = global
    ("[1,12]<stdout>: RuntimeError: boom", 12),                      # mpirun
    ("(RayTrainWorker pid=4410, ip=10.0.3.7) [rank5]: RuntimeError: boom", 5),
    ("[E ProcessGroupNCCL.cpp:1182] [Rank 6] NCCL watchdog thread terminated", 6),
    ("step 40 | lm loss 2.31 | grad norm 0.9", None),
])
def test_rank_of_is_the_global_rank(line, rank):
    assert rank_of(line) == rank


def test_strip_prefixes_leaves_the_programs_own_line():
    assert strip_prefixes("0: [default0]:  micro_batch_size ..... 4").strip() == "micro_batch_size ..... 4"
    assert strip_prefixes("(WorkerDict pid=63294) [rank3]:[E416 20:40:12.9 x.cpp:1] boom") == "[E416 20:40:12.9 x.cpp:1] boom"
    assert strip_prefixes("trainer-0 [stderr] [rank1]: hello") == "hello"
    assert strip_prefixes("[2025-01-01 10:00:00] plain") == "[2025-01-01 10:00:00] plain"   # a timestamp stays


@pytest.mark.parametrize("prefix", ["0: [default0]:", "[node041:0]:", "(RayTrainWorker pid=41, ip=10.0.3.7) ",
                                    "[1,0]<stdout>:", ""])
def test_the_arguments_dump_is_read_behind_any_launcher_prefix(run, prefix):
    args = "".join(f"{prefix}{line}\n" for line in ARGS.splitlines())
    d = run(args + f"1: [default3]:[rank11]: {OOM}\n")
    assert d.job.get("micro_batch_size") == 4 and d.job.get("tensor_model_parallel_size") == 8
    oom = d.findings[0]
    assert oom.symptom == "cuda_oom" and oom.facts.get("ranks") == [11] and "rank 11" in oom.title
    halve = next(s for s in oom.steps if s.id.startswith("cuda_oom.halve"))
    assert [(c.from_, c.to) for c in halve.changes if c.name == "--micro-batch-size"] == [(4, 2)]


def _timeouts(ranks):
    return "".join(f"[rank{r}]:[E1130 10:00:01.{r} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
                   "operation timeout: WorkNCCL(SeqNum=4410, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                   "Timeout(ms)=600000) ran for 600100 milliseconds before timing out.\n" for r in ranks)


def test_a_hole_in_the_reporting_ranks_is_the_lagging_rank_even_without_a_world_size(run):
    f = run(_timeouts([0, 1, 2, 3, 4, 6, 7])).findings[0]
    assert f.facts["lagging_ranks"] == [5] and "rank 5 is behind" in f.title
    assert run(_timeouts([0, 1, 2, 3, 4, 5, 6, 7])).findings[0].facts["lagging_ranks"] == []   # nobody missing
    assert run(_timeouts([0, 2, 4, 6])).findings[0].facts["lagging_ranks"] == []   # too many holes to guess
    assert run(_timeouts([2, 3, 5, 6])).findings[0].facts["lagging_ranks"] == []   # a cut paste: rank 0 not even there
