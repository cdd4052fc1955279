"""python -m scenarios — list the runnable scenarios, one line each (same as ``cmstack list``)."""

import sys

from cmstack.scenarios.loader import listing

if __name__ == "__main__":
    print("\n".join(listing()))
    sys.exit(0)
