"""The stats schema: every figure declared once, with merge rule and export decision.

``stats()``, ``to_dict()``, ``report()``, Prometheus and ``cluster_stats``
are read from ``fastloop.telemetry.schema``; these tests fail when a figure
reaches one of them without a declaration, or is declared without saying
how processes' values merge and whether Prometheus gets it.
"""

from __future__ import annotations

import json
import re

import fastloop
from fastloop.telemetry.fields import (
    Count,
    Derived,
    Histogram,
    Maximum,
    Part,
    Section,
    Unexported,
)
from fastloop.telemetry.histogram import Buckets
from fastloop.telemetry.schema import Snapshot, StreamStats, WriteStats

METRIC = re.compile(r"fastloop_[a-z_]+")


def declared(section: type[Section], prefix: str = ""):
    """(dotted name, field) for every figure of a section and its parts."""
    for field in section.fields:
        where = prefix + (field.in_dict_of + "." if isinstance(field, Derived)
                          and field.in_dict_of else "")  # fmt: skip
        yield where + field.name, field
        if isinstance(field, Part):
            yield from declared(field.section, f"{prefix}{field.name}.")


def leaves(data: dict, prefix: str = ""):
    for key, value in data.items():
        if isinstance(value, dict):
            yield prefix + key, value
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield prefix + key, value


def test_every_key_of_to_dict_is_a_declared_figure_and_every_figure_is_a_key():
    keys = dict(leaves(fastloop.stats().to_dict()))
    assert set(keys) == {name for name, _ in declared(Snapshot)}


def test_every_figure_has_a_merge_rule_and_an_export_decision():
    undecided = []
    for name, field in declared(Snapshot):
        if not field.merge_rule:
            undecided.append(f"{name}: no merge rule")
        metric = field.metric
        if isinstance(metric, Unexported):
            if not metric.reason:
                undecided.append(f"{name}: not exported, and no reason")
        elif not (isinstance(metric, str) and METRIC.fullmatch(metric)):
            undecided.append(f"{name}: no export decision ({metric!r})")
        if not field.help:
            undecided.append(f"{name}: no help")
    assert undecided == []


def test_every_key_of_a_snapshot_that_is_not_a_count_has_a_merge_rule():
    """``cluster_stats`` merges by the schema's kinds: only counts are summed."""
    summed = []
    for name, field in declared(Snapshot):
        if field.merge_rule == "sum":
            assert isinstance(field, Count), name
            looks_derived = "max" in name or re.search(r"p\d\d", name)
            if looks_derived:
                summed.append(name)
    assert summed == []
    for name, field in declared(Snapshot):
        if isinstance(field, Maximum):
            assert field.merge_rule == "maximum", name


def test_a_snapshot_merges_with_another_kind_by_kind():
    def one(calls_at: int, max_ns: int, installed: list[str]) -> Snapshot:
        data = fastloop.stats().to_dict()
        writes = data["write_to_fd"]
        writes.update(
            calls=3, bytes_written=100, max_ns=max_ns,
            histogram=[[(1 << calls_at) - 1, 3]], total_ns=3 * (1 << calls_at),
        )  # fmt: skip
        data["installed"] = installed
        return Snapshot.from_dict(json.loads(json.dumps(data)))

    a = one(10, 1_000, ["add_callback", "write_to_fd"])
    b = one(20, 900_000, ["write_to_fd"])
    merged = a.merge(b)
    writes = merged.write_to_fd
    assert writes.calls == 6 and writes.bytes_written == 200
    assert writes.max_ns == 900_000  # the maximum of maxima
    assert writes.histogram == Buckets.from_pairs([[1023, 3], [(1 << 20) - 1, 3]])
    assert writes.p50_ns == 1023 and writes.p99_ns == 900_000  # from the merged
    assert merged.installed == ("write_to_fd",)  # active in every process
    assert merged.to_dict()["write_to_fd"]["p99_ns"] == 900_000


def test_one_streams_figures_are_the_write_figures():
    assert [f.name for f in StreamStats.fields] == [f.name for f in WriteStats.fields]
    assert StreamStats() == StreamStats()
    assert StreamStats().calls == 0 and list(StreamStats().histogram) == []


def test_histograms_stay_bucket_counts_until_shown():
    histograms = [f for _, f in declared(Snapshot) if isinstance(f, Histogram)]
    assert histograms
    snapshot = fastloop.stats()
    for field in histograms:
        assert isinstance(field.zero(), Buckets)
    assert isinstance(snapshot.write_to_fd.histogram, Buckets)
    assert isinstance(snapshot.to_dict()["write_to_fd"]["histogram"], list)


def test_a_snapshot_pickles_as_its_figures():
    # dask's client.run sends what a function returns between processes.
    import pickle

    with fastloop.patched():
        snapshot = fastloop.stats()
    assert snapshot.installed  # some figure is not a zero
    copy = pickle.loads(pickle.dumps(snapshot))
    assert copy == snapshot
    assert copy.to_dict() == snapshot.to_dict()
    assert pickle.loads(pickle.dumps(snapshot.read_interest)) == snapshot.read_interest
