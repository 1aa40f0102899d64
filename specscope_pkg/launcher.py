"""One entry point for both faces: ``specscope`` opens the app; ``specscope run|bench|verify|attach|serve|report`` stays
headless.

Dispatching here, before anything imports Qt or torch, keeps the headless commands free of a display and
the app's start-up free of torch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

# The CLI's subcommands (core/commands/cli.py's parser; a test checks the two agree). A name missing here opens the app,
# which then rejects the command's arguments as its own.
HEADLESS_COMMANDS = {"run", "bench", "verify", "attach", "serve", "report"}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in HEADLESS_COMMANDS:
        from specscope.core.commands.cli_checks import quiet_signals_while_starting

        quiet_signals_while_starting()  # Ctrl-C while torch imports: one line, not a traceback
        from specscope.core.commands.cli import main as cli_main

        return cli_main(args)
    if args == ["--app-help"]:  # the app's own options (its parser imports no Qt)
        from specscope.app.main import build_parser

        build_parser().print_help()
        return 0
    if args and args[0] in {"-h", "--help"} and len(args) == 1:
        print("usage: specscope [APP OPTIONS]                  open the desktop app (see specscope --app-help)\n"
              "       specscope run|bench|verify|attach|serve|report ...  headless commands (specscope run --help)")
        return 0
    from specscope.app.main import main as app_main

    return int(app_main(args) or 0)


def cli() -> int:
    """Console entry point (``specscope-cli``): headless commands only, with a console on every OS."""
    from specscope.core.commands.cli_checks import quiet_signals_while_starting

    quiet_signals_while_starting()
    from specscope.core.commands.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
