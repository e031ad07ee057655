"""Observation of the kernel's events: OpenTelemetry, the audit log and replay."""
