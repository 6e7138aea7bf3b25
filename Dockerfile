# Train Triage: `triage serve` as a non-root user; the SQLite store lives in the /data volume.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TRIAGE_DB=/data/triage.db
RUN useradd --create-home --uid 10001 triage && mkdir -p /data && chown triage /data
WORKDIR /app
# Dependencies first, from pyproject.toml alone, so a source change does not reinstall them (layer cache). The
# `fast` extra brings Hyperscan (the scanner the benchmarks measure; on ARM/Graviton its wheel is built on Vectorscan)
# and pyahocorasick only on machines without such a wheel.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['fast']))" > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt && rm -rf /root/.cache /tmp/requirements.txt
COPY bot bot
COPY core core
COPY engine engine
COPY parsers parsers
COPY playbooks playbooks
COPY knowledge knowledge
# The project as `make` installs it (Makefile, $(STAMP)): editable, then its bytecode compiled ahead, since the
# unprivileged user cannot write __pycache__ here and every `triage` start would otherwise compile from source.
RUN pip install --no-cache-dir --no-deps -e . \
 && python -m compileall -q bot core engine parsers playbooks knowledge >/dev/null \
 && rm -rf /root/.cache
USER triage
VOLUME ["/data"]
EXPOSE 3000
# In HTTP mode the bot answers /healthz; in Socket Mode there is no port and the check is skipped.
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s \
  CMD python -c "import os,sys,urllib.request; sys.exit(0) if os.environ.get('SLACK_APP_TOKEN') else urllib.request.urlopen('http://127.0.0.1:3000/healthz', timeout=2)"
ENTRYPOINT ["triage"]
CMD ["serve", "--port", "3000"]
