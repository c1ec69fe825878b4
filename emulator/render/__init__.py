"""GitHub-shaped JSON for the emulator's objects, shared by REST and webhooks."""
