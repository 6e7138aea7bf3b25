"""Parsers, one module per symptom family, listed explicitly. ContextParser gathers versions and job settings."""
from parsers import context, efa_mr, fork, loss, moe, nccl_error, nvlink, oom, timeout, transport, versions, xid

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
)
