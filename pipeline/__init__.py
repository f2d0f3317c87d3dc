"""lagpilot's Quix Streams pipeline: read __consumer_offsets and watermarks, model, decide."""

import contextlib
import os
import warnings

# The model's matrices are small (groups x partitions of one topic): a second BLAS thread
# costs more in hand-off than it gives (bench/perf/model.py measures it). Set before numpy
# loads OpenBLAS; a value the user set wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# quixstreams imports authlib's httpx integration, which warns at import that authlib will
# move to "httpx2". Nothing here uses it and no user can act on it. authlib installs an
# "always" filter for its warnings when imported, so it is imported first and our "ignore"
# for that one message goes in front of it.
with contextlib.suppress(ImportError):
    import authlib.deprecate  # noqa: F401
warnings.filterwarnings("ignore", message="The httpx module is deprecated")
