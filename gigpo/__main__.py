"""`python -m gigpo ...` is the `gigpo` command, for machines where the package is on PYTHONPATH but not installed."""
import sys

from gigpo.cli import main

sys.exit(main())
