"""Message generations found missing by wave 22's first look (blind, real cases): each in the program's own wording,
with host names, paths and numbers of our own, and a near miss each."""

SKIP = "[gpu07] 2026-11-30 10:{:02d}:01,120 (trainer:581) WARNING: The grad norm is nan. Skipping updating the model.\n"
ITER = ("[gpu07] 2026-11-30 10:09:02,004 (trainer:636) INFO: 3epoch:train:801-1200batch: iter_time=2.9e-04, "
        "forward_time=0.104, loss=61.2, backward_time=0.081, optim0_lr0=1.2e-05, train_time=0.61\n")
FLASH = ("    import flash_attn_2_cuda as flash_attn_cuda\n"
         "ImportError: /opt/venv/lib/python3.11/site-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: "
         "undefined \nsymbol: _ZN3c104cuda9SetDeviceEi\n"
         "/opt/venv/lib/python3.11/site-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: "
         "_ZN3c104cuda9SetDeviceEi\n"
         "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 811) of binary: "
         "/opt/venv/bin/python\n")


def test_a_trainer_that_keeps_skipping_steps_on_a_nan_grad_norm_is_loss_nan(run):
    f = run("".join(SKIP.format(i) for i in range(4)) + ITER).findings[0]
    assert (f.symptom, f.rule) == ("loss_nan", "loss_nan.grad_norm")
    assert f.facts["grad_norm_nan_points"] == 4
    assert any("The grad norm is nan" in e.text for e in f.evidence)
    # near miss: one skipped step (an early fp16 overflow) in an otherwise healthy run is not a finding
    assert not run(SKIP.format(1) + ITER).findings
    assert not run("INFO: the grad norm is finite again after warm-up\n" + ITER).findings


def test_an_extensions_undefined_symbol_on_a_line_of_its_own_is_a_version_mismatch(run):
    f = run(FLASH).findings[0]
    assert (f.symptom, f.facts.get("missing")) == ("version_mismatch", "_ZN3c104cuda9SetDeviceEi")
    assert f.facts["library"] == "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"
    # near miss: a linker's word for something else
    assert not run("warning: relocation against undefined symbol in read-only section of a static archive\n").findings


def _profiler(step_pct: float, batch_pct: float) -> str:
    rule = "-" * 55 + "  " + "  ".join(["-" * 12] * 6)
    head = (f"{'Name':>55}  {'Self CPU %':>12}  {'Self CPU':>12}  {'CPU total %':>12}  {'CPU total':>12}  "
            f"{'CPU time avg':>12}  {'# of Calls':>12}")
    rows = [("ProfilerStep*", "70.10%", "12.400s", f"{step_pct:.2f}%", "15.300s", "3.060s", "5"),
            ("[pl][profile]run_training_batch", "0.00%", "702.000us", f"{batch_pct:.2f}%", "1.900s", "380.000ms", "5"),
            ("Optimizer.step#AdamW.step", "3.10%", "611.000ms", "8.20%", "1.800s", "360.000ms", "5")]
    body = "\n".join(f"{r[0]:>55}  " + "  ".join(f"{c:>12}" for c in r[1:]) for r in rows)
    return f"FIT Profiler Report\nProfile stats for: records\n{rule}\n{head}\n{rule}\n{body}\n"


def test_a_lightning_profiler_step_spent_mostly_outside_its_batch_is_input_bound(run):
    f = run(_profiler(86.0, 9.0)).findings[0]
    assert (f.symptom, f.rule) == ("slow_input", "slow_input.profiler_step_gap")
    assert f.facts["input_share_pct"] == 89.5 and len(f.evidence) == 2
    # near miss: the batch is most of the step (a compute-bound run)
    assert not run(_profiler(86.0, 80.0)).findings


SMI = """+-----------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  NVIDIA A10G         On   | 00000000:00:1B.0 Off |                    0 |
|  0%   51C    P0   {p0}W / 300W |  {m0}MiB / 23028MiB |     {u0}%      Default |
+-------------------------------+----------------------+----------------------+
|   1  NVIDIA A10G         On   | 00000000:00:1C.0 Off |                    0 |
|  0%   50C    P0   {p1}W / 300W |  {m1}MiB / 23028MiB |     {u1}%      Default |
+-------------------------------+----------------------+----------------------+
"""


def test_a_snapshot_of_every_gpu_underfed_is_low_utilisation(run):
    f = run(SMI.format(p0=104, m0=14210, u0=36, p1=97, m1=14198, u1=29)).findings[0]
    assert (f.symptom, f.rule, f.facts["gpus"]) == ("low_gpu_util", "low_gpu_util.snapshot", 2)
    assert "29-36%" in f.title
    # near misses: one GPU busy (a healthy instant), GPUs without a job's memory, a busy GPU at full power
    assert not run(SMI.format(p0=104, m0=14210, u0=36, p1=281, m1=14198, u1=97)).findings
    assert not run(SMI.format(p0=60, m0=3, u0=36, p1=58, m1=3, u1=29)).findings
    assert not run(SMI.format(p0=270, m0=14210, u0=45, p1=265, m1=14198, u1=44)).findings
