"""Device tools: python -m tools.device.deploy | flash | selftest (docs/firmware.md)."""
