"""The `kpilot` command: parses arguments and prints; no logic lives here."""
