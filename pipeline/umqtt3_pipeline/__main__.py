"""python -m umqtt3_pipeline: the telemetry job, as the umqtt3-pipeline
command (job.py)."""
import sys

from .job import main

sys.exit(main())
