"""Collectors read what the log says about the job and find no symptom; they run before any parser finishes."""
from parsers.collectors import context, framework, nccl_tests, step_time, unclaimed

# In this order: the benchmark collector reads the instance family the context collector found.
COLLECTORS = (
    context.COLLECTOR,
    framework.COLLECTOR,
    nccl_tests.COLLECTOR,
    step_time.COLLECTOR,
    unclaimed.COLLECTOR,
)
