FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TRIAGE_DB=/data/triage.db
RUN useradd --create-home --uid 10001 triage && mkdir -p /data && chown triage /data
WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot bot
COPY core core
COPY parsers parsers
COPY playbooks playbooks
COPY knowledge knowledge
RUN pip install --no-cache-dir .
USER triage
VOLUME ["/data"]
ENTRYPOINT ["triage"]
CMD ["--help"]
