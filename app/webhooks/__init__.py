"""Webhook intake building blocks: signature check and lenient event parsing."""
