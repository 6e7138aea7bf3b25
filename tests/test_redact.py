"""Each masking rule, one by one, plus near-misses that must stay untouched."""
import json

import pytest

from core.redact import Masker, mask_secrets

SECRETS = [
    ("export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("SLACK_BOT_TOKEN=xoxb-123456789012-123456789012-abcdefABCDEF", "xoxb-123456789012-123456789012-abcdefABCDEF"),
    ("app token xapp-1-A0123-456789-abcdef0123456789", "xapp-1-A0123-456789-abcdef0123456789"),
    ("git clone https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/x/y", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.sig", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.sig"),
    ("MLFLOW_TRACKING_URI=https://admin:s3cr3tP4ss@mlflow.internal:5000", "s3cr3tP4ss"),
    ("db password: hunter2hunter2", "hunter2hunter2"),
    ("role arn:aws:iam::123456789012:role/Trainer", "123456789012"),
    ("AWS account id 210987654321 in us-east-1", "210987654321"),
]


@pytest.mark.parametrize("text,secret", SECRETS)
def test_secret_is_masked(text, secret):
    out = mask_secrets(text)
    assert secret not in out and "<" in out


@pytest.mark.parametrize("text", [
    "WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=123456789012, NumelOut=123456789012)",
    "token drop rate: 18.4% | tokens per expert: [1, 2]",
    "max_tokens=2048 secret_sauce_enabled",
    "NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.9.1-aws",
    "python train.py --tokenizer gpt2 --max-tokens 100000",
    "max_new_tokens=204800 and token_budget=12",
    "[rank0]: loss token count 123456 | Token embeddings resized",
    "mlflow at https://mlflow.corp:5000/api/2.0?user=ops@example.com",
])
def test_near_misses_are_left_alone(text):
    assert mask_secrets(text) == text


def test_identifiers_are_masked_reversibly_for_the_llm():
    m = Masker(identifiers=True)
    text = ("ip-10-1-2-3:411:411 [0] NCCL WARN peer 10.1.2.4<5012> fe80::ba59:9f03:c1:8f2 mail ops@example.com "
            "key AKIAIOSFODNN7EXAMPLE; again 10.1.2.4")
    masked = m.mask(text)
    for real in ("ip-10-1-2-3", "10.1.2.4", "fe80::ba59:9f03:c1:8f2", "ops@example.com", "AKIAIOSFODNN7EXAMPLE"):
        assert real not in masked
    assert masked.count("<IPV4_1>") == 2  # stable: the same value gets the same placeholder
    assert m.unmask(masked) == text


def test_evidence_from_a_log_full_of_secrets_is_masked(run):
    log = ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
           "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. token=abcdef123456 "
           "GPU 0 has a total capacity of 79.15 GiB of which 1.00 GiB is free.\n")
    d = run(log)
    dumped = json.dumps(d.to_json_dict())
    assert "abcdef123456" not in dumped and d.findings[0].facts["free_gib"] == 1.0


def test_values_next_to_korean_text_and_seeded_hostnames_are_masked():
    m = Masker(identifiers=True)
    m.seed(["p5-st-2"])
    text = "ip-10-1-2-3를 drain, 10.0.0.1에서 p5-st-2를 점검, AKIAIOSFODNN7EXAMPLE가 노출"
    masked = m.mask(text)
    for real in ("ip-10-1-2-3", "10.0.0.1", "p5-st-2", "AKIAIOSFODNN7EXAMPLE"):
        assert real not in masked
    assert "<HOST_1>를" in masked and m.unmask(masked) == text
