"""``python -m cmstack.campaign``: ``cmstack campaign``, or with ``--child`` one variant in this fresh
process (a Dask task's ``run_job_subprocess``: the job as JSON on stdin)."""

import json
import sys

from cmstack.campaign.driver import main
from cmstack.campaign.executors import _die_with_parent, run_job

if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:  # a Dask task's fresh process: one job as JSON on stdin
        _die_with_parent()
        run_job(json.loads(sys.stdin.read()))
        sys.exit(0)
    sys.exit(main())
