"""`python -m verdigris` is the `verdigris` command."""
import sys

from .cli import main

sys.exit(main())
