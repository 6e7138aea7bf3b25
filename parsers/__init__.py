"""Parsers, one module per symptom family, listed explicitly. ContextParser gathers versions and job settings."""
from parsers import (context, efa_mr, fork, loss, moe, nccl_error, nccl_tests, nvlink, oom, timeout, transport,
                     unclaimed, versions, xid)

PARSERS = (
    context.ContextParser,
    oom.PARSER,
    timeout.PARSER,
    nccl_error.PARSER,
    efa_mr.PARSER,
    transport.PARSER,
    fork.PARSER,
    loss.PARSER,
    xid.PARSER,
    nvlink.PARSER,
    versions.PARSER,
    moe.PARSER,
    nccl_tests.PARSER,
    unclaimed.PARSER,
)
