"""`triage fleet`: every job under directories, globs or S3 prefixes triaged at once: the run and its summary (fleet),
the jobs listed and read (jobs), S3 (s3), and the executors, Ray Data or local processes (run). May import bot's top,
answer, store and proactive (the units `triage watch` uses); never bot.cli or bot.slack."""
