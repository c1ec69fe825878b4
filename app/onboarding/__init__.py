"""Onboarding: when the App is installed on a repository without
``.github/repairbot.yml``, propose one in a pull request (and create the
trigger label) instead of running with guessed settings."""
