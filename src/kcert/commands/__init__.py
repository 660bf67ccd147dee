"""The command line's subcommands (registered in :data:`kcert.cli.COMMANDS`). Every module here is light
at import: torch and the rest of kcert are imported inside ``run``."""

EXIT_PASS, EXIT_FAIL, EXIT_ERROR, EXIT_REVIEW = 0, 1, 2, 3
from ..settings import DEFAULT_HORIZON  # noqa: F401 (the commands' horizon; kcert.settings is torch-free)
