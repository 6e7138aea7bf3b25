"""Stand-ins shared by the tests and the benchmarks (neither imports the other): a fake Slack Web API, an
OpenAI-compatible LLM stub, a local Socket Mode endpoint, log generators and adversarial parser inputs."""
