"""Trigger metadata: every key validated, errors name the key and the fix."""

from __future__ import annotations

import pytest

from pipeline.serve.keda.metadata import (
    CAPACITY,
    OFFSET_LAG,
    TIME_LAG,
    MetadataError,
    parse_metadata,
)

GOOD = {"group": "doc-parsers", "topic": "docs.raw", "targetTimeLagSeconds": "30"}


def test_minimal_metadata_takes_the_documented_defaults() -> None:
    spec = parse_metadata({**GOOD, "scalerAddress": "lagpilot-scaler:9105"})
    assert (spec.group, spec.topic, spec.target_time_lag_s) == ("doc-parsers", "docs.raw", 30.0)
    assert spec.metric == CAPACITY and spec.target_size == 1.0
    assert spec.activation_time_lag_s == 0.0 and spec.max_replicas is None
    assert spec.metric_name == "lagpilot-capacity-doc-parsers-docs.raw"


def test_every_key_is_read() -> None:
    spec = parse_metadata({**GOOD, "metric": "offsetLag", "targetOffsetLag": "5000",
                           "activationTimeLagSeconds": "2", "maxReplicas": "12",
                           "exitWindowSeconds": "20", "smoothingSeconds": "0",
                           "scaleDownWindowSeconds": "60"})  # fmt: skip
    assert spec.metric == OFFSET_LAG and spec.target_size == 5000.0
    assert (spec.activation_time_lag_s, spec.max_replicas) == (2.0, 12)
    assert (spec.exit_window_s, spec.smoothing_s, spec.scale_down_window_s) == (20.0, 0.0, 60.0)
    assert parse_metadata({**GOOD, "metric": "timeLag"}).target_size == 30.0
    assert parse_metadata({**GOOD, "metric": "timeLag"}).metric == TIME_LAG


@pytest.mark.parametrize(
    ("md", "key", "words"),
    [
        ({"topic": "t", "targetTimeLagSeconds": "30"}, "group", "missing"),
        ({"group": "g", "targetTimeLagSeconds": "30"}, "topic", "missing"),
        ({"group": "g", "topic": "t"}, "targetTimeLagSeconds", "missing"),
        ({**GOOD, "targetTimeLagSeconds": "soon"}, "targetTimeLagSeconds", "not a number"),
        ({**GOOD, "targetTimeLagSeconds": "0"}, "targetTimeLagSeconds", "out of range"),
        ({**GOOD, "targetTimeLagSeconds": "nan"}, "targetTimeLagSeconds", "out of range"),
        ({**GOOD, "activationTimeLagSeconds": "-1"}, "activationTimeLagSeconds", "out of range"),
        ({**GOOD, "activationTimeLagSeconds": "30"}, "activationTimeLagSeconds", "not below"),
        ({**GOOD, "maxReplicas": "0"}, "maxReplicas", "at least 1"),
        ({**GOOD, "maxReplicas": "2.5"}, "maxReplicas", "whole number"),
        ({**GOOD, "metric": "lag"}, "metric", "capacity, timeLag, offsetLag"),
        ({**GOOD, "metric": "offsetLag"}, "targetOffsetLag", "missing"),
        ({**GOOD, "targetTimeLagSecond": "3"}, "targetTimeLagSecond", "targetTimeLagSeconds"),
        ({**GOOD, "lagThreshold": "10"}, "lagThreshold", "known keys"),
    ],
)
def test_a_bad_or_missing_key_is_named_with_its_fix(
    md: dict[str, str], key: str, words: str
) -> None:
    with pytest.raises(MetadataError) as err:
        parse_metadata(md)
    assert err.value.key == key
    assert f"scalerMetadata.{key}:" in str(err.value) and words in str(err.value)
    assert "; " in str(err.value)  # problem; fix


def test_docs_keda_md_lists_exactly_the_keys_the_scaler_reads() -> None:
    import re
    from pathlib import Path

    from pipeline.serve.keda.metadata import OUR_KEYS

    text = (Path(__file__).resolve().parents[5] / "docs" / "keda.md").read_text()
    section = text.split("## ScaledObject metadata", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert set(documented) - {"capacity", "timeLag", "offsetLag"} == set(OUR_KEYS)
