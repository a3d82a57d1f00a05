"""Run at the start of each Python worker Spark launches for the job in
local mode (job._worker_path puts this directory on their PYTHONPATH).

Spark puts $SPARK_HOME/python/lib/pyspark.zip and py4j's zip first on a
worker's path, and Python compiles every module it imports from a zip anew:
about 0.5 s of CPU each time a worker starts (measured: docs/pipeline.md).
With PySpark installed by pip those zips hold the very package installed
beside them, whose modules are compiled once and cached, so they are taken
off the path. A zip of another Spark installation is left alone."""
import os
import sys


def _installed_zip(entry):
    # <site-packages>/pyspark/python/lib/<name>.zip: part of the installed package
    lib = os.path.dirname(entry)
    home = os.path.dirname(os.path.dirname(lib))
    return (entry.endswith(".zip") and os.path.basename(lib) == "lib"
            and os.path.basename(home) == "pyspark"
            and os.path.isfile(os.path.join(home, "__init__.py")))


sys.path[:] = [p for p in sys.path if not _installed_zip(p)]
