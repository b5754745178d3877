"""`python -m towline_step <module>:<attribute>`: run a decorated step function as a step container would.

A step type's image may use it as its command (`["python3", "-m", "towline_step",
"greeter:greet"]`) instead of an `if __name__ == "__main__"` block; the harness
runs functions this way too, so what it exercises is `main()` itself. A step
that cannot be loaded still leaves a result document saying why.
"""

from __future__ import annotations

import os
import sys

from towline_step.protocol import EXIT_USAGE, ErrorClass, result_path_from
from towline_step.redact import Redactor
from towline_step.result import Outcome, render


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m towline_step <module>:<attribute>  (a function decorated with @step)", file=sys.stderr)
        return EXIT_USAGE
    try:
        # Imported here: the loader is the SDK's, and without the sdk extra its ImportError (naming the extra)
        # is what the result document says.
        from towline_step.loader import load_step  # noqa: PLC0415

        target = load_step(args[0])
    except Exception as error:  # whatever importing the step's module raised: say so in the result
        message = f"the step's image cannot load {args[0]!r}: {type(error).__name__}: {error}"
        print(message, file=sys.stderr)
        outcome, text = render(Outcome.failure(ErrorClass.PERMANENT, message), Redactor())
        try:
            result_path_from(os.environ).write_text(text, encoding="utf-8")
        except OSError as write_error:
            print(f"could not write the result document: {write_error.strerror}", file=sys.stderr)
        return outcome.exit_code
    return target.main()


if __name__ == "__main__":
    raise SystemExit(main())
