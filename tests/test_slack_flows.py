"""The Slack bot end to end: signed requests into the real Bolt app over HTTP, answers into a fake Slack Web API."""
import gzip
import json
import urllib.request

from conftest import FIXTURES

OOM = (FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_text()
HANG = (FIXTURES / "nccl_timeout" / "lagging_rank.log").read_text()


def _texts(blocks):
    out = []
    for b in blocks or []:
        if b.get("text"):
            out.append(b["text"]["text"])
        for e in b.get("elements", []):
            if isinstance(e.get("text"), str):
                out.append(e["text"])
    return "\n".join(out)


def test_healthz(slack_bot):
    h = slack_bot()
    with urllib.request.urlopen(h.url + "/healthz") as r:
        assert r.status == 200 and json.loads(r.read()) == {"ok": True}


def test_slash_command_acks_then_answers_at_response_url(slack_bot):
    h = slack_bot()
    status, body, took = h.slash(OOM)
    assert status == 200 and "Diagnosing" in body.decode()
    resp = h.fake.wait(lambda: h.fake.responses)[0]
    assert resp["response_type"] == "in_channel"
    text = _texts(resp["blocks"])
    assert "Root cause: cuda_oom" in text
    assert "--micro-batch-size 2   # was 4" in text and "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert "[ML]" in text and "`oom#micro-batch`" in text
    assert "line 21:" in text
    rows = h.store.recent(5)
    assert rows[0]["top_symptom"] == "cuda_oom" and rows[0]["channel"] == "C1"
    assert len(resp["blocks"]) <= 50 and all(len(b.get("text", {}).get("text", "")) <= 3000 for b in resp["blocks"])


def test_slash_without_text_gives_usage_and_question_gives_runbook_sections(slack_bot):
    h = slack_bot()
    status, body, _ = h.slash("")
    assert status == 200 and "Usage" in body.decode()
    h.slash("allreduce is slow on p5, how do I reduce the pipeline bubble?")
    resp = h.fake.wait(lambda: h.fake.responses)[0]
    text = _texts(resp["blocks"])
    assert "Runbook sections" in text and "performance#" in text


def test_channel_outside_allow_list_is_refused_politely(slack_bot):
    h = slack_bot(TRIAGE_ALLOWED_CHANNELS="C_OK")
    status, body, _ = h.slash(OOM, channel="C_OTHER")
    assert status == 200 and "not enabled in this channel" in body.decode()
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT> help", "ts": "1.1", "channel": "C_OTHER"})
    msg = h.fake.wait_calls("chat.postMessage")[0]
    assert "not enabled" in msg["text"]
    assert h.store.recent() == [] and h.fake.responses == []


def test_bad_signature_is_rejected(slack_bot):
    from testkit.fakeslack import post_signed, slash_body
    h = slack_bot()
    status, _, _ = post_signed(h.url + "/slack/events", "wrong-secret", slash_body(OOM, h.fake.response_url()),
                               "application/x-www-form-urlencoded")
    assert status == 401
    assert h.store.recent() == []


def test_thread_mention_triages_pasted_text_and_gz_file_once_despite_retry(slack_bot):
    h = slack_bot()
    url = h.fake.add_file("hang.log.gz", gzip.compress(HANG.encode()))
    h.fake.threads[("C1", "100.1")] = [
        {"user": "U1", "ts": "100.1", "text": "job 1234 died:\n```" + OOM + "```"},
        {"user": "U2", "ts": "100.2", "text": "ranks log attached", "files": [
            {"id": "F1", "name": "hang.log.gz", "mimetype": "application/gzip", "size": 500,
             "url_private_download": url}]},
        {"user": "U3", "ts": "100.3", "text": "any idea?"},
        {"user": "U1", "ts": "100.4", "text": "<@UBOT> please look", "thread_ts": "100.1"},
    ]
    event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> please look", "ts": "100.4",
             "thread_ts": "100.1", "channel": "C1", "team": "T1"}
    assert h.event(event, "EvA")[0] == 200
    assert h.event(event, "EvA", extra={"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})[0] == 200
    h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))
    posts = [p for p in h.fake.called("chat.postMessage") if p.get("blocks")]
    syms = sorted(_texts(p["blocks"]).split("Root cause: ")[1].split("\n")[0] for p in posts)
    assert syms == ["cuda_oom", "nccl_timeout"]
    assert all(p["thread_ts"] == "100.1" for p in posts)
    assert [p["name"] for p in h.fake.called("reactions.add")] == ["eyes", "white_check_mark"]
    assert h.fake.called("reactions.remove")[0]["name"] == "eyes"
    assert h.fake.file_auth == ["Bearer xoxb-test-token"]
    assert len(h.fake.called("conversations.replies")) == 1  # the retry was dropped
    assert len(h.store.recent()) == 2


def test_a_pasted_crash_no_parser_knows_is_answered_with_its_lines_and_chat_is_not(slack_bot):
    h = slack_bot()
    crash = ("[rank5]: Traceback (most recent call last):\n[rank5]:   File \"train.py\", line 88, in <module>\n"
             "[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered")
    h.fake.threads[("C1", "300.1")] = [
        {"user": "U1", "ts": "300.1", "text": "run 77 died overnight:\n```" + crash + "```"},
        {"user": "U2", "ts": "300.2", "text": "we had this before\nnot sure what fixed it"},
        {"user": "U1", "ts": "300.3", "text": "<@UBOT>", "thread_ts": "300.1"},
    ]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>", "ts": "300.3", "thread_ts": "300.1",
             "channel": "C1"}, "EvU")
    h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))
    posts = [p for p in h.fake.called("chat.postMessage") if p.get("blocks")]
    assert len(posts) == 1
    text = _texts(posts[0]["blocks"])
    assert ":grey_question:" in text and "(×1): [rank5]: RuntimeError: CUDA error: an illegal memory" in text
    assert "healthy" not in text


def _node_files_thread(h, root):
    files = []
    for i, path in enumerate(sorted((FIXTURES / "multinode").glob("*.out"))):
        url = h.fake.add_file(path.name, path.read_bytes())
        files.append({"id": f"FN{i}", "name": path.name, "mimetype": "text/plain", "url_private_download": url})
    h.fake.threads[("C1", root)] = [{"user": "U1", "ts": root, "text": "job 1234 hung, node logs:", "files": files}]


def test_together_in_the_mention_reads_the_threads_node_logs_as_one(slack_bot):
    h = slack_bot()
    _node_files_thread(h, "400.1")
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT> together please", "ts": "400.2",
             "thread_ts": "400.1", "channel": "C1"}, "EvT")
    h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))
    posts = [p for p in h.fake.called("chat.postMessage") if p.get("blocks")]
    assert len(posts) == 1
    text = _texts(posts[0]["blocks"])
    assert "Root cause: nccl_timeout" in text and "rank 8, 9, 10, 11, 12, 13, 14, 15 are behind" in text
    assert "p5-st-1.out:10:" in text and "p5-st-2" in text
    assert len(h.store.recent()) == 1


def test_together_reads_the_members_of_one_attached_archive_as_one_log(slack_bot):
    import io
    import tarfile
    h = slack_bot()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for path in sorted((FIXTURES / "multinode").glob("*.out")):
            data = path.read_bytes()
            info = tarfile.TarInfo(f"job-77/{path.name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    url = h.fake.add_file("job-77-logs.tar.gz", buf.getvalue())
    h.fake.threads[("C1", "402.1")] = [{"user": "U1", "ts": "402.1", "text": "logs of job 77", "files": [
        {"id": "FA", "name": "job-77-logs.tar.gz", "mimetype": "application/gzip", "url_private_download": url}]}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT> 같이 봐줘", "ts": "402.2", "thread_ts": "402.1",
             "channel": "C1"}, "EvA2")
    h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))
    posts = [_texts(p["blocks"]) for p in h.fake.called("chat.postMessage") if p.get("blocks")]
    assert len(posts) == 1 and "are behind" in posts[0] and "p5-st-2" in posts[0]
    assert "job-77-logs.tar.gz:job-77/p5-st-1.out:10:" in posts[0]


def test_without_together_each_node_log_says_it_holds_one_nodes_ranks(slack_bot):
    h = slack_bot()
    _node_files_thread(h, "401.1")
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>", "ts": "401.2", "thread_ts": "401.1",
             "channel": "C1"}, "EvS")
    h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))
    posts = [_texts(p["blocks"]) for p in h.fake.called("chat.postMessage") if p.get("blocks")]
    assert len(posts) == 2
    assert all("every node's log is needed" in t and "together" in t for t in posts)
    assert not any("are behind" in t for t in posts)


def test_file_outside_slack_is_not_fetched_with_the_token(slack_bot):
    h = slack_bot()
    h.fake.threads[("C1", "5.1")] = [{"user": "U1", "ts": "5.1", "text": "<@UBOT>", "files": [
        {"id": "F9", "name": "x.log", "mimetype": "text/plain", "url_private_download": "https://evil.example/x.log"}]}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>", "ts": "5.1", "channel": "C1"}, "EvB")
    notes = h.fake.wait(lambda: [p for p in h.fake.called("chat.postMessage") if "Notes" in p.get("text", "")])
    assert "not a Slack file URL" in notes[0]["text"]
    assert h.fake.file_auth == []


def test_message_shortcut_replies_in_thread(slack_bot):
    h = slack_bot()
    payload = {"type": "message_action", "callback_id": "diagnose_message", "trigger_id": "1", "team": {"id": "T1"},
               "user": {"id": "U7"}, "channel": {"id": "C1"}, "response_url": h.fake.response_url(),
               "message": {"type": "message", "user": "U2", "ts": "200.5", "text": HANG}}
    assert h.interactive(payload)[0] == 200
    post = h.fake.wait(lambda: [p for p in h.fake.called("chat.postMessage") if p.get("blocks")])[0]
    assert post["thread_ts"] == "200.5" and "Root cause: nccl_timeout" in _texts(post["blocks"])
    assert "rank 3 is behind" in _texts(post["blocks"])


def test_feedback_votes_are_stored_and_the_message_updated(slack_bot):
    h = slack_bot()
    h.slash(OOM)
    h.fake.wait(lambda: h.fake.responses)
    did = h.store.recent(1)[0]["id"]
    base = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": "U9"}, "channel": {"id": "C1"},
            "message": {"ts": "300.1", "text": "x"}, "container": {"type": "message", "message_ts": "300.1"},
            "trigger_id": "1", "api_app_id": "A1", "response_url": h.fake.response_url(2)}
    h.interactive({**base, "actions": [{"action_id": "triage_vote_up", "block_id": f"feedback:{did}",
                                        "value": str(did), "type": "button"}]})
    upd = h.fake.wait_calls("chat.update")[0]
    assert upd["ts"] == "300.1" and "marked this helpful" in _texts(upd["blocks"])
    assert h.store.get(did)["vote"] == "up"
    h.interactive({**base, "actions": [{"action_id": "triage_wrong", "block_id": f"feedback:{did}", "type":
                                        "static_select", "selected_option": {"value": f"{did}:gpu_xid"}}]})
    h.fake.wait_calls("chat.update", 2)
    row = h.store.get(did)
    assert row["vote"] == "down" and row["correct_symptom"] == "gpu_xid"


def test_app_home_lists_recent_diagnoses_and_weekly_counts(slack_bot):
    h = slack_bot()
    h.slash(OOM)
    h.fake.wait(lambda: h.fake.responses)
    h.event({"type": "app_home_opened", "user": "U1", "channel": "D1", "tab": "home"}, "EvH")
    view = h.fake.wait_calls("views.publish")[0]["view"]
    text = _texts(view["blocks"])
    assert view["type"] == "home" and "`cuda_oom`: 1" in text and "#1 `cuda_oom`" in text


def test_long_answer_attaches_the_full_diagnosis(slack_bot):
    h = slack_bot()
    cascade = (FIXTURES / "cuda_oom" / "timeout_cascade.log").read_text()
    h.fake.threads[("C1", "9.1")] = [{"user": "U1", "ts": "9.1", "text": "<@UBOT>\n" + cascade}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>\n" + cascade, "ts": "9.1", "channel": "C1"}, "EvL")
    done = h.fake.wait_calls("files.completeUploadExternal")[0]
    assert done.get("thread_ts") == "9.1"
    assert b"ROOT CAUSE" in next(iter(h.fake.uploads.values()))


def test_korean_locale_gets_a_korean_phrased_answer_with_real_values(slack_bot):
    from testkit.fakellm import FakeLLM
    llm = FakeLLM("echo")
    try:
        h = slack_bot(TRIAGE_LLM="openai:gpt-test", TRIAGE_LLM_BASE_URL=llm.url)
        h.fake.users["U1"] = {"id": "U1", "locale": "ko-KR"}
        h.slash(HANG)
        first, resp = h.fake.wait(lambda: len(h.fake.responses) >= 2 and h.fake.responses)[:2]
        assert "근본 원인은 nccl_timeout" not in _texts(first["blocks"])   # the deterministic answer goes out first
        assert resp.get("replace_original") in (True, "true") and resp.get("response_type") == "in_channel"
        text = _texts(resp["blocks"])
        assert "근본 원인: NCCL collective 타임아웃(행)" in text
        assert "근본 원인은 nccl_timeout" in text and "조치: " in text      # the LLM's phrasing, in its place
        assert "export TORCH_NCCL_TRACE_BUFFER_SIZE=2000" in text          # changes stay deterministic
        assert "p5-st-2" in text and "p5-st-2" not in llm.raw[0].decode()   # masked for the LLM, restored here
        assert h.fake.called("users.info")[0]["include_locale"] in ("true", "1", True)
    finally:
        llm.stop()


def test_a_mention_is_answered_before_the_model_replies_then_the_answer_is_replaced_in_place(slack_bot):
    """Never in the way: with a slow model the deterministic answer is posted at once; the accepted phrasing then
    replaces that same message (chat.update on its ts), and no second answer is posted."""
    from testkit.fakellm import FakeLLM
    llm = FakeLLM("echo", delay=3.0)
    try:
        h = slack_bot(TRIAGE_LLM="openai:gpt-test", TRIAGE_LLM_BASE_URL=llm.url)
        h.fake.threads[("C1", "7.1")] = [{"user": "U1", "ts": "7.1", "text": "<@UBOT>\n" + HANG}]
        h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>\n" + HANG, "ts": "7.1", "channel": "C1"},
                "EvP")
        post = [p for p in h.fake.wait_calls("chat.postMessage") if p.get("blocks")][0]
        assert not h.fake.called("chat.update")                    # the model has not answered yet
        assert "Do this: " not in _texts(post["blocks"]) and "Root cause: " in _texts(post["blocks"])
        update = h.fake.wait_calls("chat.update")[0]
        posted_ts = [m["ts"] for m in h.fake.posted if m.get("text") == post.get("text")][0]
        assert update["ts"] == posted_ts and update["channel"] == "C1"
        assert "Do this: " in _texts(update["blocks"]) and "Root cause: " in _texts(update["blocks"])
        assert len([p for p in h.fake.called("chat.postMessage") if p.get("blocks")]) == 1
    finally:
        llm.stop()


def test_a_rejected_phrasing_leaves_the_posted_answer_alone(slack_bot):
    from testkit.fakellm import FakeLLM
    llm = FakeLLM("bad-env")
    try:
        h = slack_bot(TRIAGE_LLM="openai:gpt-test", TRIAGE_LLM_BASE_URL=llm.url)
        h.fake.threads[("C1", "8.1")] = [{"user": "U1", "ts": "8.1", "text": "<@UBOT>\n" + HANG}]
        h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>\n" + HANG, "ts": "8.1", "channel": "C1"},
                "EvR")
        h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))
        h.fake.wait(lambda: llm.requests)
        assert [p for p in h.fake.called("chat.postMessage") if p.get("blocks")]
        assert not h.fake.called("chat.update")
    finally:
        llm.stop()


def test_user_and_log_text_is_posted_inert(slack_bot):
    """A question or a log line holding Slack control sequences must not ping the channel or hide a link."""
    h = slack_bot()
    h.slash("why does NCCL hang? <!channel> see <https://evil.example/x|the runbook> &lt;!here&gt;")
    resp = h.fake.wait(lambda: h.fake.responses)[0]
    dumped = json.dumps(resp)
    assert resp["response_type"] == "ephemeral"
    for live in ("<!channel>", "<https://evil", "<!here>"):
        assert live not in dumped
    assert "&lt;!channel&gt;" in dumped
    log = OOM.replace("Tried to allocate", "<!here> <@U0ADMIN> Tried to allocate")
    h.slash(log)
    resp = h.fake.wait(lambda: len(h.fake.responses) > 1 and h.fake.responses)[1]
    text = _texts(resp["blocks"]) + resp.get("text", "")
    assert "<!here>" not in text and "<@U0ADMIN>" not in text and "&lt;!here&gt;" in text


def test_help_shows_usage_instead_of_searching_for_the_word_help(slack_bot):
    h = slack_bot()
    status, body, _ = h.slash("help")
    assert status == 200 and "/diagnose <paste a log>" in body.decode() and "together" in body.decode()
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT> help", "ts": "500.1", "channel": "C1"}, "EvH")
    msg = h.fake.wait_calls("chat.postMessage")[0]
    assert "/diagnose report" in msg["text"] and not h.fake.called("conversations.replies")
    assert h.store.recent() == []


def test_a_429_from_reactions_does_not_cost_the_answer(slack_bot):
    h = slack_bot()
    h.fake.fail["reactions.add"] = (429, {"ok": False, "error": "ratelimited"})
    h.fake.threads[("C1", "600.1")] = [
        {"user": "U1", "ts": "600.1", "text": "died:\n```" + OOM + "```"},
        {"user": "U1", "ts": "600.2", "text": "<@UBOT>", "thread_ts": "600.1"}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>", "ts": "600.2", "thread_ts": "600.1",
             "channel": "C1", "team": "T1"}, "EvR")
    posts = h.fake.wait(lambda: [p for p in h.fake.called("chat.postMessage") if p.get("blocks")])
    assert "Root cause: cuda_oom" in _texts(posts[0]["blocks"]) and len(h.store.recent()) == 1


def test_runbook_questions_ignore_filler_words():
    from knowledge.runbook import load
    rb = load()
    assert rb.search("how do I tell if NCCL is using EFA?")[0].id == "efa#tcp-fallback"
    assert rb.search("help") == [] and rb.search("how do I") == []
    assert rb.search("fork cannot allocate memory huge pages")[0].id == "efa#fork-huge-pages"


def test_app_home_shows_only_what_the_person_may_see(slack_bot):
    h = slack_bot()
    h.slash(OOM, channel="C_PRIVATE", user="U1")
    h.fake.wait(lambda: h.fake.responses)
    h.event({"type": "app_home_opened", "user": "U2", "channel": "D2", "tab": "home"}, "EvH2")
    text = _texts(h.fake.wait_calls("views.publish")[0]["view"]["blocks"])
    assert "cuda_oom" not in text and "C_PRIVATE" not in text           # not theirs, not their channel
    h.fake.memberships["U3"] = ["C_PRIVATE"]
    h.event({"type": "app_home_opened", "user": "U3", "channel": "D3", "tab": "home"}, "EvH3")
    text = _texts(h.fake.wait_calls("views.publish", 2)[1]["view"]["blocks"])
    assert "`cuda_oom`: 1" in text and "#1 `cuda_oom`" in text


def test_steps_left_out_are_counted_and_a_failed_attachment_is_said(slack_bot):
    h = slack_bot()
    h.fake.fail["files.getUploadURLExternal"] = (200, {"ok": False, "error": "not_in_channel"})
    cascade = (FIXTURES / "cuda_oom" / "timeout_cascade.log").read_text()
    h.fake.threads[("C1", "9.5")] = [{"user": "U1", "ts": "9.5", "text": "<@UBOT>\n" + cascade}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>\n" + cascade, "ts": "9.5", "channel": "C1"}, "EvF")
    warn = h.fake.wait(lambda: [p for p in h.fake.called("chat.postMessage") if "could not be attached" in
                                p.get("text", "")])
    assert warn[0]["thread_ts"] == "9.5"


def test_a_failure_described_without_a_log_gets_the_commands_that_would_decide_it(slack_bot):
    h = slack_bot()
    h.slash("our 64-node job hangs at step 4000, nothing in the logs")
    text = json.dumps(h.fake.wait(lambda: h.fake.responses)[0])
    assert "No log here decides it yet" in text and "NCCL_DEBUG=INFO" in text and "TORCH_NCCL_TRACE_BUFFER_SIZE" in text
    assert "hangs#flight-recorder" in text
    h.slash("training got slow after we moved to p5, loss looks fine")
    text = json.dumps(h.fake.wait(lambda: len(h.fake.responses) > 1 and h.fake.responses)[1])
    assert "nvidia-smi dmon" in text and "all_reduce_perf" in text
    h.slash("what does the weekly review cover?")       # a question, not a failure: no evidence block
    text = json.dumps(h.fake.wait(lambda: len(h.fake.responses) > 2 and h.fake.responses)[2])
    assert "No log here decides it yet" not in text


def test_every_evidence_citation_is_a_runbook_section():
    from knowledge.evidence import all_cites, asks_for
    from knowledge.runbook import load
    assert all_cites() <= set(load().sections)
    assert [a.kind for a in asks_for("loss spikes to nan after 10k steps")] == ["loss"]
    assert asks_for("thanks, that fixed it") == []


def test_slash_plan_answers_in_channel_and_bad_input_only_to_the_asker(slack_bot):
    h = slack_bot()
    h.slash("plan 70B 64 h100-80gb --top 2")
    resp = h.fake.wait(lambda: h.fake.responses)[0]
    assert resp["response_type"] == "in_channel"
    text = _texts(resp["blocks"])
    assert "Candidates, best first" in text and "TP 8 · PP 2 · DP 4" in text
    h.slash("plan seventy 8")
    bad = h.fake.wait(lambda: len(h.fake.responses) > 1 and h.fake.responses)[1]
    assert bad["response_type"] == "ephemeral" and "not a parameter count" in bad["text"]
    assert not h.store.recent(5)   # a plan is not a diagnosis

