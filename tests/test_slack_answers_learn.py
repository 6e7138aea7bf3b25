"""Slack flows added for issues 17 and 18: a config attached in a thread answered with a diff of it, and the 👎
modal whose answer becomes a corpus case. Real Bolt app over HTTP, fake Slack Web API."""
import json

from conftest import FIXTURES
from test_slack_flows import OOM, _texts


def test_a_config_attached_in_the_thread_gets_the_fix_as_a_diff_of_it(slack_bot):
    """Issue 17: the DeepSpeed config next to the log in a thread is answered with a diff of that file."""
    h = slack_bot()
    conf = (FIXTURES / "configs" / "ds_config_zero1.json").read_text().replace(
        '"train_micro_batch_size_per_gpu": "auto"', '"train_micro_batch_size_per_gpu": 8')
    oom = ("[2024-05-03 10:12:01,332] [INFO] [config.py:1000:print]   train_micro_batch_size_per_gpu  8\n"
           "[2024-05-03 10:12:01,332] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use.\n")
    log_url, conf_url = h.fake.add_file("train.log", oom.encode()), h.fake.add_file("ds_config.json", conf.encode())
    h.fake.threads[("C1", "600.1")] = [{"user": "U1", "ts": "600.1", "text": "OOM again, config attached", "files": [
        {"id": "F1", "name": "train.log", "mimetype": "text/plain", "url_private_download": log_url},
        {"id": "F2", "name": "ds_config.json", "mimetype": "application/json", "url_private_download": conf_url}]}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>", "ts": "600.2", "thread_ts": "600.1",
             "channel": "C1"}, "EvCfg")
    h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))
    posts = [p for p in h.fake.called("chat.postMessage") if p.get("blocks")]
    assert len(posts) == 2 and all(p["thread_ts"] == "600.1" for p in posts)   # the config is not a log
    diff = _texts(posts[1]["blocks"])
    assert "Fix as a diff of `ds_config.json`" in diff and "(step cuda_oom.halve_micro_batch)" in diff
    assert '-  "train_micro_batch_size_per_gpu": 8,' in diff and '+  "train_micro_batch_size_per_gpu": 4,' in diff
    assert len(h.store.recent()) == 1


def test_tell_us_the_cause_opens_a_modal_whose_answer_becomes_a_corpus_case(slack_bot):
    """Issue 18: the 👎 modal — the right symptom (required) and the cause in words — is stored and exported."""
    from bot.cli.corpus import feedback_cases
    h = slack_bot()
    h.slash(OOM)
    h.fake.wait(lambda: h.fake.responses)
    did = h.store.recent(1)[0]["id"]
    h.interactive({"type": "block_actions", "team": {"id": "T1"}, "user": {"id": "U9"}, "channel": {"id": "C1"},
                   "trigger_id": "trig-1", "api_app_id": "A1", "container": {"type": "message", "message_ts": "1.1"},
                   "actions": [{"action_id": "triage_cause", "block_id": f"feedback:{did}", "value": str(did),
                                "type": "button"}]})
    view = h.fake.wait_calls("views.open")[0]
    modal = json.loads(view["view"]) if isinstance(view["view"], str) else view["view"]
    assert view["trigger_id"] == "trig-1" and modal["private_metadata"] == str(did)

    def submit(symptom, text):
        values = {"symptom": {"pick": {"type": "static_select", "selected_option":
                                       {"value": symptom} if symptom else None}},
                  "cause": {"text": {"type": "plain_text_input", "value": text}}}
        return h.interactive({"type": "view_submission", "team": {"id": "T1"}, "user": {"id": "U9"},
                              "api_app_id": "A1", "view": {**modal, "id": "V1", "state": {"values": values}}})
    status, body, _ = submit(None, "no idea")
    assert status == 200 and "Pick the symptom" in body.decode() and h.store.get(did)["vote"] is None
    status, _, _ = submit("nccl_error", "a bad EFA cable on node 7 <!channel> HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz1234")
    assert status == 200
    row = h.store.get(did)
    assert (row["vote"], row["correct_symptom"]) == ("down", "nccl_error")
    assert row["correct_text"].startswith("a bad EFA cable on node 7") and "hf_abcdefghij" not in row["correct_text"]
    case = next(c for c in feedback_cases(h.store) if c["id"] == f"feedback-{did}")
    assert case["label"] == "nccl_error" and "the user says: a bad EFA cable" in case["note"]
