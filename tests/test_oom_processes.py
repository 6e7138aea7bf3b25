"""An OOM message that lists the processes on the GPU: another process's memory is named only when it matters."""
import pytest

MSG = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
       "of 79.10 GiB of which 3.50 MiB is free. {procs} Of the allocated memory 16.90 GiB is allocated by PyTorch, and "
       "512.00 MiB is reserved by PyTorch but unallocated.")


@pytest.mark.parametrize("procs,other", [
    ("Process 41234 has 61.20 GiB memory in use. Process 51877 has 17.88 GiB memory in use.", (61.2, [41234])),
    ("Process 51877 has 17.88 GiB memory in use. Process 7 has 30.00 GiB memory in use. "
     "Process 8 has 31.00 GiB memory in use.", (61.0, [7, 8])),
    # near-misses: only this process, or another one holding little (a monitoring agent)
    ("Process 51877 has 78.90 GiB memory in use.", None),
    ("Process 51877 has 78.10 GiB memory in use. Process 900 has 812.00 MiB memory in use.", None),
])
def test_other_processes_on_the_gpu(run, procs, other):
    f = run(MSG.format(procs=procs)).findings[0]
    ids = [s.id for s in f.steps]
    if other is None:
        assert "other_processes_gib" not in f.facts and "cuda_oom.other_process" not in ids
    else:
        assert (f.facts["other_processes_gib"], f.facts["other_pids"]) == other
        assert ids[0] == "cuda_oom.other_process"


SELF = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 34.00 MiB. GPU 0 has a total capacity "
        "of 23.52 GiB of which 12.44 MiB is free. {procs} Of the allocated memory 19.58 GiB is allocated by PyTorch, and "
        "201.40 MiB is reserved by PyTorch but unallocated.")


@pytest.mark.parametrize("procs,other", [
    # PyTorch names this process "this process" and lists the others by PID, before or after it
    ("Process 2210457 has 2.31 GiB memory in use. Process 2211902 has 1.06 GiB memory in use. Including non-PyTorch "
     "memory, this process has 20.12 GiB memory in use.", (3.37, [2210457, 2211902])),
    ("Including non-PyTorch memory, this process has 20.12 GiB memory in use. Process 2210457 has 3.30 GiB memory in "
     "use.", (3.3, [2210457])),
    # near-misses: a small agent beside this process, or this process alone
    ("Process 900 has 612.00 MiB memory in use. Including non-PyTorch memory, this process has 20.12 GiB memory in use.",
     None),
    ("Including non-PyTorch memory, this process has 20.12 GiB memory in use.", None),
])
def test_this_process_is_told_apart_from_the_others(run, procs, other):
    f = run(SELF.format(procs=procs)).findings[0]
    assert f.facts["process_in_use_gib"] == 20.12   # not the first PID's figure
    if other is None:
        assert "other_processes_gib" not in f.facts
    else:
        assert (f.facts["other_processes_gib"], f.facts["other_pids"]) == other
        assert f.steps[0].id == "cuda_oom.other_process"
