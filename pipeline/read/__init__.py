"""Stage 1, read: ``__consumer_offsets`` and the high watermarks, as plain values.

- ``offsets`` (with ``group_metadata``) and ``commit_table``: the pure decoders of the
  coordinator's records (one function per version; unknown kinds skipped and counted),
  on the wire reader and the KIP-848 records of ``pipeline.coordinator``;
- ``commits``: the Quix source reading ``__consumer_offsets`` (own group filtered out),
  with ``membership_scan`` (the start-up scan of group membership) and ``topic_ids``;
- ``watermarks``: the high-watermark sampler (one message per topic per tick).
"""
