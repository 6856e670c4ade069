"""The bounded batch processor: background export, bounded queue, counted losses."""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rag_monitor
from tests.services import wait_until


class BlockingExporter(SpanExporter):
    """Blocks in export until released: an agent that hangs."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.exported: list = []

    def export(self, spans):
        self.entered.set()
        self.release.wait(10)
        self.exported.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        self.release.set()


class FailingExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.FAILURE

    def shutdown(self):
        pass


def one_span_queries(monitor, n):
    for i in range(n):
        with monitor.query(str(i)):
            pass


def test_full_queue_drops_and_counts_without_blocking_the_app():
    exporter = BlockingExporter()
    monitor = rag_monitor.init(
        service_name="s", span_exporter=exporter, max_queue_size=4, max_export_batch_size=1, schedule_delay_s=60
    )
    one_span_queries(monitor, 1)
    assert exporter.entered.wait(10)  # the worker is stuck in export
    one_span_queries(monitor, 10)  # returns although the exporter hangs
    stats = monitor.stats()
    assert (stats.queued, stats.dropped, stats.exported) == (4, 6, 0)
    exporter.release.set()
    assert monitor.force_flush()
    stats = monitor.stats()
    assert (stats.exported, stats.dropped, stats.failed, stats.queued) == (5, 6, 0, 0)
    # The oldest spans were dropped: the newest four survive.
    assert [s.attributes["input.value"] for s in exporter.exported[1:]] == ["6", "7", "8", "9"]
    monitor.shutdown()


def test_worker_exports_on_its_schedule_without_flush():
    exporter = InMemorySpanExporter()
    monitor = rag_monitor.init(service_name="s", span_exporter=exporter, schedule_delay_s=0.05)
    one_span_queries(monitor, 3)
    wait_until(lambda: len(exporter.get_finished_spans()) == 3, timeout=10, what="background export")
    assert monitor.stats().exported == 3
    monitor.shutdown()


def test_full_batch_wakes_the_worker_early():
    exporter = InMemorySpanExporter()
    monitor = rag_monitor.init(service_name="s", span_exporter=exporter, max_export_batch_size=2, schedule_delay_s=3600)
    one_span_queries(monitor, 2)
    wait_until(lambda: len(exporter.get_finished_spans()) == 2, timeout=10, what="batch-size wake-up")
    monitor.shutdown()


def test_shutdown_exports_the_queue_and_counts_later_spans_as_dropped():
    exporter = InMemorySpanExporter()
    monitor = rag_monitor.init(service_name="s", span_exporter=exporter, schedule_delay_s=3600)
    one_span_queries(monitor, 5)
    monitor.shutdown()
    assert len(exporter.get_finished_spans()) == 5
    one_span_queries(monitor, 2)
    assert monitor.stats().dropped == 2
    assert monitor.force_flush() is False


def test_failed_exports_are_counted():
    monitor = rag_monitor.init(service_name="s", span_exporter=FailingExporter(), schedule_delay_s=3600)
    one_span_queries(monitor, 3)
    assert monitor.force_flush() is False
    assert (monitor.stats().failed, monitor.stats().exported) == (3, 0)
    monitor.shutdown()


def test_worker_backs_off_after_a_failure_and_shutdown_counts_what_is_left():
    monitor = rag_monitor.init(
        service_name="s", span_exporter=FailingExporter(), max_export_batch_size=1, schedule_delay_s=3600
    )
    processor = monitor._processor
    one_span_queries(monitor, 3)  # a full batch wakes the worker; its export fails
    wait_until(lambda: processor._backoff_s == 3600, timeout=10, what="backoff after a failed export")
    # It stopped at the first failure instead of failing every queued batch in a row.
    assert monitor.stats().failed == 1
    monitor.shutdown(timeout_s=5)
    stats = monitor.stats()
    # Shutdown tries once more (fails) and counts the span it could not send as dropped.
    assert (stats.failed, stats.dropped, stats.queued) == (2, 1, 0)
