"""lagpilot's Quix Streams pipeline: read __consumer_offsets and watermarks, model, decide."""

import contextlib
import warnings

# quixstreams imports authlib's httpx integration, which warns at import that authlib will
# move to "httpx2". Nothing here uses it and no user can act on it. authlib installs an
# "always" filter for its warnings when imported, so it is imported first and our "ignore"
# for that one message goes in front of it.
with contextlib.suppress(ImportError):
    import authlib.deprecate  # noqa: F401
warnings.filterwarnings("ignore", message="The httpx module is deprecated")
