"""The headless commands: the CLI's argument parsing, run, bench, verify (the CLI imports torch lazily)."""
