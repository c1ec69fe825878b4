# repairbot: one image for the web and worker processes (see fly.toml).
#
#   docker build --build-arg REPAIRBOT_CODE_VERSION=$(git rev-parse HEAD) -t repairbot .
#
# The first stage builds the wheel and its dependencies' wheels; the second
# installs them alone (no source tree, no compiler), exactly what
# tests/packaging/test_wheel.py checks: the installed `repairbot` migrates,
# serves and runs workflows with its migrations found inside the package.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY handlers ./handlers
COPY activities ./activities
COPY emulator ./emulator
COPY migrations ./migrations
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
# Adding an agent CLI or a toolchain: repository commands and command agents run
# in the sandbox, which mounts /usr, /bin, /lib*, /etc and /opt read-only, so
# install them there in a stage of your own built FROM this image, e.g.
#   FROM repairbot AS repairbot-with-tools
#   USER root
#   RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm \
#       golang-go make && npm install -g @anthropic-ai/claude-code \
#       && rm -rf /var/lib/apt/lists/*
#   USER repairbot
# then set REPAIRBOT_AGENT_COMMAND='["claude", "-p"]' (plus REPAIRBOT_AGENT_NETWORK=true
# and the key's name in REPAIRBOT_AGENT_COMMAND_ENV / REPAIRBOT_AGENT_API_KEYS:
# docs/agents.md). A toolchain elsewhere (say /opt/cargo) must be listed in
# REPAIRBOT_SANDBOX_READ_ONLY to be visible to commands.
# git: workspaces, commits and pushes. bubblewrap: the sandbox repository
# commands run in. uidmap: newuidmap/newgidmap, which map the sandbox user to a
# subordinate uid of the worker's (docs/security.md). tini: reaps the
# sandbox's children and forwards signals.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git bubblewrap uidmap util-linux \
       ca-certificates tini \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels repairbot \
    && rm -rf /wheels \
    && useradd --create-home --uid 10001 repairbot \
    && (grep -q '^repairbot:' /etc/subuid 2>/dev/null \
        || usermod --add-subuids 100000-165535 --add-subgids 100000-165535 repairbot) \
    && mkdir -p /var/lib/repairbot && chown repairbot /var/lib/repairbot

# Not root: bubblewrap makes its namespaces as this user (unprivileged user
# namespaces, which Fly's VMs allow; under Docker the worker needs a seccomp
# profile that permits them), and repository commands run as its first
# subordinate uid (100000), never as repairbot itself. Nothing here needs to survive a restart:
# evidence and state are in PostgreSQL, workspaces are rebuilt per attempt.
USER repairbot
ARG REPAIRBOT_CODE_VERSION=dev
ENV REPAIRBOT_DATA_DIR=/var/lib/repairbot \
    REPAIRBOT_CODE_VERSION=${REPAIRBOT_CODE_VERSION} \
    PYTHONUNBUFFERED=1
EXPOSE 8000
ENTRYPOINT ["tini", "--"]
CMD ["repairbot", "web", "--host", "0.0.0.0", "--port", "8000"]
