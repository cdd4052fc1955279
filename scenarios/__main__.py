"""python -m scenarios — list the runnable scenarios, one line each (same as ``cmstack list``)."""
import sys

from cmstack.cli import cmd_list

if __name__ == "__main__":
    sys.exit(cmd_list(None))
