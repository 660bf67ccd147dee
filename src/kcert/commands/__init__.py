"""The command line's subcommands (registered in :data:`kcert.cli.COMMANDS`). Every module here is light
at import: torch and the rest of kcert are imported inside ``run``."""

EXIT_PASS, EXIT_FAIL, EXIT_ERROR, EXIT_REVIEW = 0, 1, 2, 3
DEFAULT_HORIZON = 6.25e5  # kcert.certification.DEFAULT_HORIZON (not imported from there: it imports torch)
