"""Errors that end a command with one clear line and exit status 2 (never a traceback)."""


class UserError(Exception):
    """Bad input or an unusable environment: reported as one line, exit status 2."""

    exit_code = 2


class ConfigError(UserError):
    """A config key is unknown, mistyped or impossible; the message names the key."""
