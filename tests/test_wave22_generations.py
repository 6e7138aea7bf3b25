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
