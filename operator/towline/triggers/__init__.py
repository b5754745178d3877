"""Triggers: cron schedules (in the operator) and the webhook ingress (its own Deployment)."""
