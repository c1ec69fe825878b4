"""Everything repairbot says to GitHub, one idea per module.

- ``auth``: App JWT (githubkit) and the installation-token cache (margin, single-flight,
  one refresh on 401).
- ``client``: ``GitHubClientFactory``, built once per worker from ``Settings``.
- ``errors``: GitHub and transport failures -> transient / permanent / ambiguous.
- ``markers``: hidden operation markers in the bodies we write, and finding them.
- ``comments``, ``pulls``, ``checks``: ensure-style writes found by marker first.
- ``merge``: the sha-pinned merge and its outcomes.
- ``publish`` (with ``gitcmd``): deterministic commits and conditional branch pushes.
- ``repos``: ``RepoRef`` (owner and name).

Nothing here reads the environment or opens a connection at import time.
"""
