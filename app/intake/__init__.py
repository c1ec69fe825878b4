"""Webhook intake: verify, record and route deliveries; the delivery log, its
reconciler and the webhook-proxy client."""
