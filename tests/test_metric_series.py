"""The metric-series reader on short pastes and slow climbs: people paste 3-5 lines around the event, and a run
diverges gradually as often as it spikes once. Near-misses (noisy per-batch losses, a slow rise inside the noise,
early-training wiggles) stay quiet."""
import pytest


def _symptoms(d):
    return [f.symptom for f in d.findings]


@pytest.mark.parametrize("text", [
    # lit-gpt style: one point of history, then a jump to ~6.7x
    "iter 880 step 110: loss 1.6612, iter time: 1104.20ms (optimizer.step)\n"
    "iter 881 step 110: loss 11.2081, iter time: 1261.75ms\n"
    "iter 882 step 110: loss 11.5012, iter time: 1109.60ms\n",
    # HF Trainer dicts without grad norms: two points, then ~5x
    "{'loss': 0.7031, 'learning_rate': 0.00017, 'epoch': 0.31}\n{'loss': 0.8114, 'learning_rate': 0.00017, "
    "'epoch': 0.31}\n{'loss': 4.1022, 'learning_rate': 0.00017, 'epoch': 0.31}\n{'loss': 0.7402, 'learning_rate': "
    "0.00017, 'epoch': 0.31}\n",
    # GPT-NeoX iteration lines: 1.13, 1.16, then 11.6 (just under ten times)
    " iteration        1/  5000 | lm_loss: 1.131000E+00 | loss scale: 65536.0 | number of nan iterations:   0 |\n"
    " iteration        2/  5000 | lm_loss: 1.160200E+00 | loss scale: 65536.0 | number of nan iterations:   0 |\n"
    " iteration        3/  5000 | lm_loss: 1.159000E+01 | loss scale: 65536.0 | number of nan iterations:   0 |\n",
])
def test_a_short_paste_with_a_large_jump_is_a_spike(run, text):
    assert _symptoms(run(text))[:1] == ["loss_spike"]


def test_a_noisy_detection_loss_doubling_in_two_points_is_not_a_spike(run):
    # per-iteration detection losses move by whole units; 0.31 -> 1.31 is 4.3x but only 1.0 above
    text = ("Epoch [1][400/9000]\tlr: 0.02000, time: 2.013, loss_rpn_cls: 0.2121, loss: 0.3071\n"
            "Epoch [1][401/9000]\tlr: 0.02000, time: 2.013, loss_rpn_cls: 0.4542, loss: 1.3134\n"
            "Epoch [1][402/9000]\tlr: 0.02000, time: 1.764, loss_rpn_cls: 0.5243, loss: 1.2892\n")
    assert "loss_spike" not in _symptoms(run(text))


def _megatron(losses, start=6000):
    return "".join(f" iteration {start + 10 * i:>8}/  150000 | elapsed time per iteration (ms): 18500.0 | lm loss: "
                   f"{v:.6E} | loss scale: 4096.0 | grad norm: 1.000 | number of nan iterations:   0 |\n"
                   for i, v in enumerate(losses))


def test_a_climb_of_four_rises_to_half_again_is_a_spike(run):
    d = run(_megatron([6.31, 6.52, 7.28, 9.05, 10.11]))
    f = d.findings[0]
    assert f.symptom == "loss_spike"
    assert f.facts["loss_before"] == 6.31 and f.facts["loss_at_spike"] == pytest.approx(10.11)


@pytest.mark.parametrize("losses", [
    [6.31, 6.52, 7.28, 9.05, 9.20],            # rises 46%: under half again
    [6.31, 6.52, 7.28, 9.05, 8.90, 10.11],     # the climb breaks before it reaches half again from 6.31
    [1.20, 1.35, 0.91, 0.95, 1.56, 0.86, 1.01, 1.10, 1.29, 1.52],   # a noisy curve: the climb ends below its window's top
])
def test_climbs_that_are_not_divergence_stay_quiet(run, losses):
    assert "loss_spike" not in _symptoms(run(_megatron(losses)))


def _hf(epoch, g="nan", loss=1.70):
    return f"{{'loss': {loss}, 'grad_norm': {g}, 'learning_rate': 1.35e-06, 'epoch': {epoch}}}\n"


def test_every_logged_grad_norm_nan_past_the_first_steps_is_loss_nan(run):
    d = run(_hf(0.01) + "  1%|          | 10/1233 [07:54<14:12:16, 41.81s/it]\n" + _hf(0.02, loss=1.15))
    assert (d.findings[0].symptom, d.findings[0].rule) == ("loss_nan", "loss_nan.grad_norm")


@pytest.mark.parametrize("text", [
    _hf(0.0) + _hf(0.0),                              # the first logged steps: fp16's first skips belong there
    _hf(0.01, g="0.81") + _hf(0.02) + _hf(0.03),      # a finite grad norm before: skips now and then (two in a row)
])
def test_nan_grad_norms_that_may_be_fp16_skips_stay_quiet(run, text):
    assert "loss_nan" not in _symptoms(run(text))


@pytest.mark.parametrize("text, symptom", [
    ("loss tensor(0.6924, device='cuda:0', dtype=torch.float16, grad_fn=<MeanBackward0>)\n"
     "loss tensor(nan, device='cuda:0', dtype=torch.float16, grad_fn=<MeanBackward0>)\n", "loss_nan"),
    ("".join(f"loss at batch {5 * i} = tensor({v}, device='cuda:0', grad_fn=<AddBackward0>)\n"
             for i, v in enumerate([2.31, 2.28, 2.30, 2.27, 2.29, 9.84])), "loss_spike"),
])
def test_a_loss_printed_as_a_tensor_is_read(run, text, symptom):
    assert _symptoms(run(text))[:1] == [symptom]


def _hf_quoted(losses):
    return "".join(f"{{'loss': '{v}', 'grad_norm': '0.9', 'learning_rate': '0.001', 'epoch': '{0.04 * (i + 1):.4g}'}}\n"
                   for i, v in enumerate(losses))


def test_a_jump_off_a_falling_curve_is_a_spike(run):
    # early training: the window's median lags the falling trend, so the jump hides under it without the trend rule
    d = run(_hf_quoted([5.936, 5.481, 5.146, 4.844, 4.55, 4.256, 4.002, 3.734, 3.483, 3.215, 2.965, 2.698, 2.498,
                        2.309, 3.109, 6.261, 3.215, 1.821]))
    f = d.findings[0]
    assert f.symptom == "loss_spike" and f.facts["loss_before"] == 2.309 and f.facts["loss_at_spike"] == 6.261
    assert f.facts["spikes"] == 1


def test_a_noisy_per_batch_curve_with_a_large_swing_stays_quiet(run):
    assert "loss_spike" not in _symptoms(run(_hf_quoted([1.2, 2.9, 0.8, 2.6, 1.1, 3.0, 0.9, 2.4, 1.0, 2.1])))


def test_a_progress_bar_redrawing_one_loss_is_no_noise_level(run):
    # tqdm redraws repeat the postfix: three points, two of them the same value, then a 1.7x move is not a spike
    text = "".join(f"Iteration: [{i}/64]  97%|#########4 , loss={v} [00:01<00:00]\n"
                   for i, v in ((62, 0.171), (62, 0.0717), (63, 0.0717), (63, 0.121), (64, 0.121)))
    assert "loss_spike" not in _symptoms(run(text))


def test_a_doubling_after_a_redrawn_value_is_still_a_spike(run):
    text = "".join(f"Iteration: [{i}/64]  97%|#########4 , loss={v} [00:01<00:00]\n"
                   for i, v in ((62, 1.71), (62, 1.55), (63, 1.55), (63, 3.9), (64, 3.9)))
    assert _symptoms(run(text))[:1] == ["loss_spike"]
