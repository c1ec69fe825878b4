# repairbot: one image for the web and worker processes (see fly.toml).
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates bubblewrap util-linux \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /srv/repairbot
COPY pyproject.toml README.md ./
COPY app ./app
COPY handlers ./handlers
COPY activities ./activities
COPY emulator ./emulator
COPY migrations ./migrations
COPY alembic.ini ./
RUN pip install --no-cache-dir . && useradd --create-home repairbot \
    && mkdir -p /data && chown repairbot /data

# The worker is unprivileged here: bubblewrap builds the sandbox for repository
# commands with user namespaces (the host must allow them; Fly.io machines do).
USER repairbot
ENV REPAIRBOT_DATA_DIR=/data PYTHONUNBUFFERED=1
EXPOSE 8000
CMD ["repairbot", "web", "--host", "0.0.0.0", "--port", "8000"]
