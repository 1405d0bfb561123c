"""``python -m sequant_eval.cli``: the ``sequant-eval`` command."""
from . import main

raise SystemExit(main())
