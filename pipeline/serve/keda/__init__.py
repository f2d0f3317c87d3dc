"""KEDA external scaler: consumers scale on lagpilot's model (docs/keda.md).

``metadata`` (a ScaledObject's trigger keys) and ``rules`` (the desired scale, activity)
are pure; ``view`` and ``scaler`` hold state without I/O; ``reader`` and ``server`` are the
edges (``lagpilot.lag``, group membership, gRPC). ``externalscaler_pb2*`` are generated.
"""
